/*
 * mcast.h - libmcast, the C client library of mcastd.
 *
 * An application connects to the local daemon mcastd over its Unix socket,
 * joins groups by name, publishes messages to them and receives the
 * messages other members publish. Data travels through shared-memory rings;
 * the socket carries only control requests.
 *
 * Conventions:
 *  - Functions return MCAST_OK (0) or a negative MCAST_E* code.
 *    mcast_strerror() describes a code; mcast_last_error() gives the
 *    detailed message of the last failure (e.g. which socket path was tried).
 *  - A NULL pointer where one is required, a string that is not UTF-8 (group
 *    and client names), or an argument out of range gives MCAST_EINVAL; the
 *    library never dereferences a NULL pointer it was handed.
 *  - Optional out-parameters (marked "may be NULL") are skipped when NULL.
 *  - Timeouts are in milliseconds; -1 means wait forever.
 *  - Threads: an mcast_client is not thread-safe. Use one client per thread,
 *    or serialise every call on a client with your own lock. Different
 *    clients may be used from different threads at the same time.
 *  - mcast_last_error(NULL, ...) is per thread.
 *
 * Build: cargo build --release -p mcast-ffi  (target/release/libmcast.so, .a)
 * Link:  cc app.c -Iengine/ffi/include -Ltarget/release -lmcast
 */
#ifndef MCAST_H
#define MCAST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
enum mcast_status {
    /* Success. */
    MCAST_OK = 0,
    /* A NULL pointer, a string that is not UTF-8, an argument out of range. */
    MCAST_EINVAL = -1,
    /* Nothing listens at the socket path: mcastd is not running there. */
    MCAST_ENOTRUNNING = -2,
    /* The daemon's configuration or the socket's file mode refused us. */
    MCAST_EPERM = -3,
    /* The publication ring is full now: retry later or publish blocking. */
    MCAST_EWOULDBLOCK = -4,
    /* A blocking call's timeout passed. */
    MCAST_ETIMEDOUT = -5,
    /* A non-blocking receive (timeout_ms 0) found no message. */
    MCAST_EAGAIN = -6,
    /* The message is larger than mcast_max_message(). */
    MCAST_ETOOLARGE = -7,
    /* The receive buffer is smaller than the waiting message; *len_out says
     * how large it is and the message is kept for the next mcast_recv. */
    MCAST_ETOOSMALL = -8,
    /* The daemon cut this client off (typically: too slow to read). The
     * client can only be closed now. */
    MCAST_ECUTOFF = -9,
    /* The connection to the daemon is gone (it stopped or hung up). The
     * client can only be closed now. */
    MCAST_EDISCONNECTED = -10,
    /* The daemon answered the request with an error (e.g. unknown group). */
    MCAST_EDAEMON = -11,
    /* The daemon sent something this library does not understand. */
    MCAST_EPROTO = -12,
    /* Any other OS error, or an internal failure of the library. */
    MCAST_EIO = -13
};

/* A connection to mcastd. Opaque; create with mcast_connect, free with
 * mcast_close. */
typedef struct mcast_client mcast_client;

/*
 * Connects to the daemon listening at socket_path (e.g.
 * "/run/mcastd/mcastd.sock") and introduces this client as name (UTF-8, for
 * the daemon's logs). The path is taken as bytes and need not be UTF-8.
 *
 * On success *out is the new client and MCAST_OK is returned; on failure
 * *out is set to NULL and the code returned, with the message for
 * mcast_last_error(NULL, ...) set on this thread. Typical failures:
 * MCAST_ENOTRUNNING (nothing at the path), MCAST_EPERM (not allowed).
 */
int mcast_connect(const char *socket_path, const char *name, mcast_client **out);

/*
 * Waits (up to 5 s) until the daemon has taken every message published so
 * far, then closes the connection and frees the client. c must not be used
 * afterwards. NULL is a no-op.
 */
void mcast_close(mcast_client *c);

/*
 * Waits up to timeout_ms (-1: forever) until the daemon has taken every
 * message published so far out of the publication ring. MCAST_OK when it
 * has, MCAST_ETIMEDOUT when the time ran out first.
 */
int mcast_flush(mcast_client *c, int timeout_ms);

/*
 * Joins the group named group (UTF-8, up to 64 bytes, no whitespace),
 * creating it if it does not exist. *group_out (may be NULL) receives the
 * group's number, used to publish to it and to tell its messages apart;
 * *rank_out (may be NULL) this client's rank in the group.
 */
int mcast_join(mcast_client *c, const char *group, uint32_t *group_out, uint32_t *rank_out);

/* Leaves the group numbered group (as returned by mcast_join). */
int mcast_leave(mcast_client *c, uint32_t group);

/*
 * Publishes len bytes at data to the group numbered group, without
 * blocking: the bytes are copied into the shared publication ring. Returns
 * MCAST_EWOULDBLOCK when the ring is full (retry, or use
 * mcast_publish_blocking) and MCAST_ETOOLARGE when len exceeds
 * mcast_max_message(). data may be NULL when len is 0.
 */
int mcast_publish(mcast_client *c, uint32_t group, const void *data, size_t len);

/*
 * Like mcast_publish, but when the ring is full waits for room up to
 * timeout_ms (-1: forever; 0: not at all), then returns MCAST_ETIMEDOUT.
 */
int mcast_publish_blocking(mcast_client *c, uint32_t group, const void *data, size_t len,
                           int timeout_ms);

/*
 * Receives the next message: copies it into buf (cap bytes), sets *len_out
 * to its length, *group_out (may be NULL) to its group's number and
 * *source_out (may be NULL) to its sender.
 *
 * timeout_ms: 0 returns at once (MCAST_EAGAIN if no message is there), -1
 * waits forever, a positive count waits that long (then MCAST_ETIMEDOUT).
 *
 * When the message is longer than cap, returns MCAST_ETOOSMALL with
 * *len_out set to its length and keeps it: the next call returns the same
 * message (without waiting), so retry with a buffer of at least *len_out
 * bytes. buf may be NULL when cap is 0 (to ask the size of the next
 * message). len_out must not be NULL.
 */
int mcast_recv(mcast_client *c, void *buf, size_t cap, size_t *len_out, uint32_t *group_out,
               uint32_t *source_out, int timeout_ms);

/* The largest message mcast_publish accepts, in bytes; 0 for NULL. */
size_t mcast_max_message(const mcast_client *c);

/*
 * The detailed message of the last call on c that failed, e.g. "daemon not
 * running at /run/mcastd/mcastd.sock (No such file or directory ...): is
 * mcastd started?". With c NULL: this thread's last failure of a call that
 * had no client (mcast_connect, or any call given a NULL client).
 *
 * Copies at most cap - 1 bytes and a terminating NUL into buf (nothing when
 * cap is 0; buf may then be NULL) and returns the message's full length
 * (like snprintf), 0 if nothing failed yet, MCAST_EINVAL if buf is NULL and
 * cap is not 0. Successful calls do not clear it: read it right after the
 * failure.
 */
int mcast_last_error(const mcast_client *c, char *buf, size_t cap);

/* A short static description of a return code; never NULL. */
const char *mcast_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* MCAST_H */
