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
     * how large it is and the message is kept for the next mcast_recv (or
     * mcast_recv_ex). From mcast_event_nodes: the list is longer than cap. */
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

/*
 * As mcast_join, if mcastd runs the group in mode ("fifo", "sequenced",
 * "total" or "broadcast"; NULL: any). An application that relies on one
 * order for every member asks for "total" or "sequenced", and is refused
 * (MCAST_EDAEMON; mcast_last_error names the setting to change) where the
 * group's configuration says otherwise.
 */
int mcast_join_mode(mcast_client *c, const char *group, const char *mode, uint32_t *group_out,
                    uint32_t *rank_out);

/* Leaves the group numbered group (as returned by mcast_join). */
int mcast_leave(mcast_client *c, uint32_t group);

/*
 * Waits at the barrier of the group numbered group up to timeout_ms (-1:
 * forever) until every member of the group has called it (the daemons'
 * tree collects the arrivals; docs/protocol.md §6.2). Nodes that left the
 * group while it waited are not waited for: up to cap of their ids go to
 * dropped (may be NULL when cap is 0) and *dropped_count (may be NULL)
 * says how many there were. MCAST_ETIMEDOUT when the time ran out first:
 * this member still counts as arrived, and its next call waits for the
 * barrier after that one.
 */
int mcast_barrier(mcast_client *c, uint32_t group, int timeout_ms, uint32_t *dropped, size_t cap,
                  size_t *dropped_count);

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

/* One message for mcast_publish_batch: len bytes at data (data may be NULL
 * when len is 0). */
typedef struct mcast_msg {
    const void *data;
    size_t len;
} mcast_msg;

/*
 * Publishes as many of the n messages at msgs, in order, as fit in the
 * publication ring now, each whole, without blocking, and sets *taken_out
 * (must not be NULL) to how many it took; offer the rest again later. One
 * copy per message and one ring commit for all of them: no system call
 * unless mcastd sleeps, no lock, no allocation.
 *
 * Returns MCAST_OK with *taken_out >= 1 (0 when n is 0);
 * MCAST_EWOULDBLOCK when not even the first fits (*taken_out 0);
 * MCAST_ETOOLARGE when the first is longer than mcast_max_message() (a
 * longer one further on ends the batch before it: the next call, which
 * starts with it, says MCAST_ETOOLARGE); MCAST_EINVAL, with nothing
 * published, when msgs is NULL and n is not 0 or an entry's data is NULL
 * and its len is not 0.
 */
int mcast_publish_batch(mcast_client *c, uint32_t group, const mcast_msg *msgs, size_t n,
                        size_t *taken_out);

/*
 * Like mcast_publish_batch, but when not even the first message fits waits
 * for room up to timeout_ms (-1: forever; 0: not at all), then returns
 * MCAST_ETIMEDOUT. On MCAST_OK at least one was taken (unless n is 0).
 */
int mcast_publish_batch_blocking(mcast_client *c, uint32_t group, const mcast_msg *msgs,
                                 size_t n, size_t *taken_out, int timeout_ms);

/* One part of a scattering for mcast_publish_scatter: len bytes at data
 * (data may be NULL when len is 0) for the member `member` of node `node`,
 * as the group's view lists it (a client's own member id is its
 * connection's id). */
typedef struct mcast_part {
    uint32_t node;
    uint64_t member;
    const void *data;
    size_t len;
} mcast_part;

/*
 * Publishes a scattering to a total-order group (mode = "total"): each of
 * the n parts at parts goes to its member only, all under one place in the
 * group's order (the same against every other message at every member),
 * and if this node fails meanwhile every surviving member gets its part or
 * none does. The parts travel together as one message: their bytes and 4 +
 * 16 per part must fit mcast_max_message() (else MCAST_ETOOLARGE). mcastd
 * refuses, with an error notice (mcast_next_notice), a part for a member
 * not in the group's view and a scattering to a group in another mode.
 *
 * timeout_ms 0: MCAST_EWOULDBLOCK when the ring is full; else waits for
 * room up to timeout_ms (-1: forever), then MCAST_ETIMEDOUT. MCAST_EINVAL
 * when parts is NULL, n is 0, or a part's data is NULL and its len not 0.
 */
int mcast_publish_scatter(mcast_client *c, uint32_t group, const mcast_part *parts, size_t n,
                          int timeout_ms);

/*
 * Receives the next data message: copies it into buf (cap bytes), sets
 * *len_out to its length, *group_out (may be NULL) to its group's number
 * and *source_out (may be NULL) to its sender. Membership events are
 * skipped (mcast_recv_ex returns them).
 *
 * timeout_ms: 0 returns at once (MCAST_EAGAIN if no message is there), -1
 * waits forever, a positive count waits that long (then MCAST_ETIMEDOUT).
 *
 * When the message is longer than cap, returns MCAST_ETOOSMALL with
 * *len_out set to its length and keeps it: the next call returns the same
 * message (without waiting), so retry with a buffer of at least *len_out
 * bytes. buf may be NULL when cap is 0 (to ask the size of the next
 * message). len_out must not be NULL.
 *
 * A message that fits is copied once, from the shared ring straight into
 * buf (no allocation); only one kept for a larger buffer is copied into
 * the library first. To take many messages per call without a copy, see
 * mcast_recv_batch.
 */
int mcast_recv(mcast_client *c, void *buf, size_t cap, size_t *len_out, uint32_t *group_out,
               uint32_t *source_out, int timeout_ms);

/* What mcast_recv_ex received (*kind_out). */
enum mcast_msg_kind {
    /* Application data published by a member. */
    MCAST_MSG_DATA = 0,
    /* A membership event of the group, written by mcastd at its place in
     * the stream: its bytes are JSON, which mcast_event_parse and
     * mcast_event_nodes read. Its source is 0. */
    MCAST_MSG_MEMBERSHIP = 1
};

/*
 * Like mcast_recv, but also returns the groups' membership events, in
 * stream order with the data, and sets *kind_out (may be NULL) to
 * MCAST_MSG_DATA or MCAST_MSG_MEMBERSHIP. Every message published before a
 * view change comes before its event; an event saying a sender is gone
 * comes after that sender's last message. An event is held like a message
 * when buf is too small (MCAST_ETOOSMALL); a later mcast_recv drops it.
 */
int mcast_recv_ex(mcast_client *c, void *buf, size_t cap, size_t *len_out, uint32_t *group_out,
                  uint32_t *source_out, int *kind_out, int timeout_ms);

/* A message or membership event lent to an mcast_recv_batch callback. */
typedef struct mcast_message_view {
    const void *data; /* its bytes: valid only until the callback returns */
    size_t len;       /* how many */
    uint32_t group;   /* its group's number */
    uint32_t source;  /* its sender (0 for a membership event) */
    int kind;         /* MCAST_MSG_DATA or MCAST_MSG_MEMBERSHIP */
} mcast_message_view;

/* Called by mcast_recv_batch with each message, arg as given to it. It must
 * return normally (no longjmp, no C++ exception) and must not call any
 * mcast_* function on the same client (mcast_event_parse and
 * mcast_event_nodes, which take no client, are fine); copy what it keeps. */
typedef void (*mcast_recv_cb)(void *arg, const mcast_message_view *m);

/*
 * Receives up to max messages and membership events, in stream order, and
 * calls cb(arg, m) with each, where m->data points straight into the shared
 * ring for a message that came in one piece: no copy, no allocation (a
 * message mcastd cut in fragments is lent from the library's reassembly
 * buffer). The ring's space goes back to mcastd once, after the last
 * callback. *count_out (may be NULL) is how many cb got.
 *
 * timeout_ms as for mcast_recv, for the first message: 0 returns at once
 * (MCAST_EAGAIN if none is there), -1 waits forever, a positive count
 * waits that long (then MCAST_ETIMEDOUT); once one is there, only what is
 * already waiting joins it. A message that mcast_recv or mcast_recv_ex kept
 * for a larger buffer (MCAST_ETOOSMALL) comes first. MCAST_EINVAL when cb
 * is NULL or max is 0.
 */
int mcast_recv_batch(mcast_client *c, size_t max, mcast_recv_cb cb, void *arg, size_t *count_out,
                     int timeout_ms);

/* What a membership event says (struct mcast_event's kind). */
enum mcast_event_kind {
    /* A shape this library does not know (a newer mcastd's): read the JSON. */
    MCAST_EVENT_OTHER = 0,
    /* The group has a new view: epoch, agent and the counts are set, and
     * mcast_event_nodes lists its members and who joined, is gone or failed. */
    MCAST_EVENT_VIEW = 1,
    /* This node was declared failed (evicted_by says by which node) and left
     * the group; mcastd joins it again as a new member, whose new view
     * follows. Messages sent meanwhile are not delivered. */
    MCAST_EVENT_EVICTED = 2,
    /* The survivors' flush of a departed sender (skipped_sender) passed over
     * skipped_frames frames that none of them kept. */
    MCAST_EVENT_SKIPPED = 3
};

/* A membership event, parsed by mcast_event_parse. Fields that do not
 * apply to the kind are 0. */
typedef struct mcast_event {
    int kind;                /* MCAST_EVENT_* */
    uint64_t epoch;          /* VIEW: the new view's epoch */
    uint32_t agent;          /* VIEW: the node of the group's agent */
    uint32_t evicted_by;     /* EVICTED: the node that declared this one failed */
    uint32_t skipped_sender; /* SKIPPED: the departed sender's node */
    uint64_t skipped_frames; /* SKIPPED: how many of its frames nobody kept */
    size_t members;          /* VIEW: members in the new view */
    size_t joined;           /* VIEW: nodes that joined with this view */
    size_t gone;             /* VIEW: nodes that left or were evicted */
    size_t failed;           /* VIEW: of the gone nodes, those this node's
                                detector suspects or declared failed */
} mcast_event;

/*
 * Parses the membership event of len bytes at data (as mcast_recv_ex
 * returned it with MCAST_MSG_MEMBERSHIP) into *out. MCAST_EINVAL when the
 * bytes are not a JSON object or a known field has the wrong type (the
 * words: mcast_last_error(NULL, ...)); an unknown shape is
 * MCAST_EVENT_OTHER.
 */
int mcast_event_parse(const void *data, size_t len, mcast_event *out);

/* The node lists of a view event (mcast_event_nodes' list). */
enum mcast_event_nodes_list {
    /* The node of each member of the new view, in rank order (a node with
     * several members appears once for each). */
    MCAST_NODES_MEMBERS = 0,
    /* The nodes that joined the group with this view. */
    MCAST_NODES_JOINED = 1,
    /* The nodes that left the group or were evicted from it. */
    MCAST_NODES_GONE = 2,
    /* Of the gone nodes, those this node suspects or declared failed (the
     * group's agent may declare a failure a little before this node does,
     * so a dead node can be gone and not yet failed). */
    MCAST_NODES_FAILED = 3
};

/*
 * Copies the node list list (MCAST_NODES_*) of the membership event at data
 * (len bytes) into out (cap node ids) and sets *count_out to the list's
 * length. MCAST_ETOOSMALL when the list is longer than cap: the first cap
 * ids are copied and *count_out says how many there are. out may be NULL
 * when cap is 0 (to ask the count); count_out must not be NULL. Events
 * other than views have empty lists.
 */
int mcast_event_nodes(const void *data, size_t len, int list, uint32_t *out, size_t cap,
                      size_t *count_out);

/* What a notice is (struct mcast_notice's kind). */
enum mcast_notice_kind {
    /* A group this client belongs to has a new view (group, epoch, members
     * set). The same change comes as a membership event in the stream. */
    MCAST_NOTICE_VIEW_CHANGED = 1,
    /* mcastd cut this client off; the text says why. Receiving returns
     * MCAST_ECUTOFF once the messages before it are taken. */
    MCAST_NOTICE_CUT_OFF = 2,
    /* mcastd is stopping; the text says why. The connection is closed. */
    MCAST_NOTICE_SHUTDOWN = 3,
    /* mcastd refused something that had no request to answer (e.g. a
     * message published to a group not joined was dropped). */
    MCAST_NOTICE_ERROR = 4
};

/* A notice's numbers, filled by mcast_next_notice. Fields that do not
 * apply to the kind are 0. */
typedef struct mcast_notice {
    int kind;       /* MCAST_NOTICE_* */
    uint32_t group; /* VIEW_CHANGED: the group's number */
    uint64_t epoch; /* VIEW_CHANGED: the new view's epoch */
    size_t members; /* VIEW_CHANGED: members in the new view */
} mcast_notice;

/*
 * Hands over the next notice mcastd sent on the control socket, without
 * waiting, oldest first: its numbers into *out, its text into buf (for a
 * cut-off or shutdown the reason, for an error the message, for a view
 * change its group, epoch and the members' nodes). The text is copied as
 * mcast_last_error copies (at most cap - 1 bytes and a NUL; buf may be NULL
 * when cap is 0) and *len_out (may be NULL) is its full length.
 *
 * MCAST_EAGAIN when no notice is waiting. Once every notice is handed over,
 * a closed connection answers MCAST_ECUTOFF or MCAST_EDISCONNECTED, as
 * receiving does. Notices that are never taken stay queued in the client.
 */
int mcast_next_notice(mcast_client *c, mcast_notice *out, char *buf, size_t cap,
                      size_t *len_out);

/* The largest message mcast_publish accepts, in bytes; 0 for NULL. */
size_t mcast_max_message(const mcast_client *c);

/* The last hop of the messages a client read, in nanoseconds: from mcastd
 * writing each into the subscription ring to the receive call that took it
 * (docs/mcastd.md "Where the time goes"). Quantiles within 1 %. */
typedef struct mcast_hop {
    uint64_t count;     /* messages timed */
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t max_ns;
    uint64_t backwards; /* stamps ahead of this client's clock */
} mcast_hop;

/*
 * With the daemon tracing (trace = true in mcastd.toml): fills *out and
 * returns 1. Returns 0, leaving *out alone, when it does not trace;
 * MCAST_EINVAL when c or out is NULL.
 */
int mcast_read_hop(const mcast_client *c, mcast_hop *out);

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
