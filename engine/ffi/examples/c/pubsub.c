/*
 * pubsub: publish or receive numbered messages through mcastd with libmcast.
 *
 *   pubsub SOCKET GROUP sub COUNT   joins GROUP, receives COUNT messages,
 *                                   checks each one's number and content,
 *                                   then publishes "ack COUNT".
 *   pubsub SOCKET GROUP pub COUNT   joins GROUP, publishes COUNT messages,
 *                                   then waits for the subscriber's ack.
 *
 * With "batch" after COUNT, the publisher publishes up to 64 messages per
 * call (mcast_publish_batch_blocking) and the subscriber takes up to 64 per
 * call, lent to a callback without a copy (mcast_recv_batch); the messages
 * and the checks are the same.
 *
 * Start the subscriber first (a group delivers only what is published after
 * one joins). Message i is "msg i:" followed by i % 200 bytes of the letter
 * 'a' + i % 26, so sizes vary; the subscriber starts with a 16-byte buffer
 * and grows it when mcast_recv_ex says MCAST_ETOOSMALL.
 *
 * Both print the group's membership events where they come in the stream
 * ("ROLE: event ...": a new view with the nodes that joined, are gone or
 * failed; this node's eviction; a skip) and mcastd's notices ("ROLE: notice
 * ...": view changes, a cut-off's or shutdown's reason, errors) as they take
 * them, each line flushed at once.
 *
 * Exit status 0 when everything arrived intact, 1 otherwise (with the
 * library's error message on stderr), 2 on bad arguments.
 *
 * Build: cc pubsub.c -I../../include -L<target>/release -lmcast
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcast.h"

#define TIMEOUT_MS 10000

static const char *role = "pubsub";

/* Prints every notice waiting (non-blocking). */
static void print_notices(mcast_client *c) {
    static const char *const kinds[] = {"?", "view changed", "cut off", "shutdown", "error"};
    mcast_notice n;
    char text[512];
    size_t len;
    while (mcast_next_notice(c, &n, text, sizeof text, &len) == MCAST_OK) {
        const char *kind = n.kind >= 1 && n.kind <= 4 ? kinds[n.kind] : kinds[0];
        printf("%s: notice %s: %s%s\n", role, kind, text, len >= sizeof text ? "..." : "");
    }
    fflush(stdout);
}

/* Prints " NAME [n, n, ...]" for one node list of a view event. */
static void print_nodes(const void *event, size_t len, int list, const char *name) {
    uint32_t nodes[64];
    size_t count = 0;
    int rc = mcast_event_nodes(event, len, list, nodes, 64, &count);
    printf(" %s [", name);
    for (size_t i = 0; i < count && i < 64; i++)
        printf(i ? ", %u" : "%u", nodes[i]);
    printf("%s]", rc == MCAST_ETOOSMALL ? ", ..." : "");
}

/* Prints one membership event (len bytes of JSON at event). Callers print
 * the notices that came with it (print_notices) once they may call into
 * the client again. */
static void print_event(uint32_t group, const void *event, size_t len) {
    mcast_event ev;
    printf("%s: event in group %u:", role, group);
    if (mcast_event_parse(event, len, &ev) != MCAST_OK) {
        printf(" unreadable: %.*s\n", (int)len, (const char *)event);
    } else if (ev.kind == MCAST_EVENT_VIEW) {
        printf(" view epoch %llu, %zu members,", (unsigned long long)ev.epoch, ev.members);
        print_nodes(event, len, MCAST_NODES_JOINED, "joined");
        printf(",");
        print_nodes(event, len, MCAST_NODES_GONE, "gone");
        printf(",");
        print_nodes(event, len, MCAST_NODES_FAILED, "failed");
        printf("\n");
    } else if (ev.kind == MCAST_EVENT_EVICTED) {
        printf(" this node was evicted by node %u; mcastd rejoins it\n", ev.evicted_by);
    } else if (ev.kind == MCAST_EVENT_SKIPPED) {
        printf(" %llu frames of departed sender %u passed over\n",
               (unsigned long long)ev.skipped_frames, ev.skipped_sender);
    } else {
        printf(" %.*s\n", (int)len, (const char *)event);
    }
    fflush(stdout);
}

static int fail(mcast_client *c, const char *what, int rc) {
    char msg[512];
    mcast_last_error(c, msg, sizeof msg);
    if (c != NULL)
        print_notices(c); /* a cut-off's reason, say */
    fprintf(stderr, "pubsub: %s: %s (%s)\n", what, mcast_strerror(rc), msg);
    return 1;
}

/* Message number i into out (at least 6 + 10 + 200 bytes); its length. */
static size_t make_message(unsigned i, char *out) {
    int n = sprintf(out, "msg %u:", i);
    size_t pad = i % 200;
    memset(out + n, 'a' + (int)(i % 26), pad);
    return (size_t)n + pad;
}

/* Whether data (len bytes, in group g) is message number i of group; says
 * why not on stderr. */
static int check_message(unsigned i, uint32_t group, uint32_t g, const char *data, size_t len) {
    char want[256];
    size_t want_len = make_message(i, want);
    if (g == group && len == want_len && memcmp(data, want, len) == 0)
        return 1;
    fprintf(stderr, "pubsub: message %u: got %zu bytes \"%.*s\" in group %u, want \"%.*s\"\n", i,
            len, (int)(len < 40 ? len : 40), data, g, (int)(want_len < 40 ? want_len : 40), want);
    return 0;
}

/* Publishes "ack COUNT" for the publisher and waits until mcastd took it. */
static int send_ack(mcast_client *c, uint32_t group, unsigned count) {
    char ack[32];
    int n = snprintf(ack, sizeof ack, "ack %u", count);
    int rc = mcast_publish_blocking(c, group, ack, (size_t)n, TIMEOUT_MS);
    if (rc != MCAST_OK)
        return fail(c, "publishing the ack", rc);
    rc = mcast_flush(c, TIMEOUT_MS);
    if (rc != MCAST_OK)
        return fail(c, "flushing the ack", rc);
    print_notices(c);
    return 0;
}

#define BATCH 64

/* What the batch subscriber's callback checks against. */
struct batch_sub {
    uint32_t group;
    unsigned next; /* the number of the next message expected */
    int bad;       /* a message was wrong: stop */
};

/* mcast_recv_batch's callback: checks one message in place (no copy) or
 * prints an event. It calls nothing on the client. */
static void on_message(void *arg, const mcast_message_view *m) {
    struct batch_sub *s = arg;
    if (m->kind == MCAST_MSG_MEMBERSHIP) {
        print_event(m->group, m->data, m->len);
        return;
    }
    if (s->bad)
        return;
    if (!check_message(s->next, s->group, m->group, m->data, m->len)) {
        s->bad = 1;
        return;
    }
    s->next++;
}

static int run_sub_batch(mcast_client *c, uint32_t group, unsigned count) {
    struct batch_sub s = {group, 0, 0};
    unsigned calls = 0;
    while (s.next < count) {
        size_t max = count - s.next < BATCH ? count - s.next : BATCH, got = 0;
        int rc = mcast_recv_batch(c, max, on_message, &s, &got, TIMEOUT_MS);
        if (rc != MCAST_OK) {
            char what[64];
            snprintf(what, sizeof what, "receiving message %u of %u", s.next, count);
            return fail(c, what, rc);
        }
        print_notices(c);
        if (s.bad)
            return 1;
        calls++;
    }
    if (send_ack(c, group, count) != 0)
        return 1;
    printf("sub: received %u messages intact in %u batch calls, acked\n", count, calls);
    return 0;
}

static int run_pub_batch(mcast_client *c, uint32_t group, unsigned count) {
    static char bufs[BATCH][256];
    mcast_msg msgs[BATCH];
    for (unsigned i = 0; i < count;) {
        size_t n = 0;
        for (; n < BATCH && i + n < count; n++) {
            msgs[n].data = bufs[n];
            msgs[n].len = make_message(i + (unsigned)n, bufs[n]);
        }
        for (size_t done = 0; done < n;) {
            size_t taken = 0;
            int rc = mcast_publish_batch_blocking(c, group, msgs + done, n - done, &taken,
                                                  TIMEOUT_MS);
            if (rc != MCAST_OK) {
                char what[64];
                snprintf(what, sizeof what, "publishing message %zu of %u", i + done, count);
                return fail(c, what, rc);
            }
            done += taken;
        }
        i += (unsigned)n;
    }
    return 0;
}

static int run_sub(mcast_client *c, uint32_t group, unsigned count) {
    size_t cap = 16;
    char *buf = malloc(cap);
    unsigned grows = 0;
    if (buf == NULL) {
        fprintf(stderr, "pubsub: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < count;) {
        size_t len = 0;
        uint32_t g = 0, source = 0;
        int kind = MCAST_MSG_DATA;
        int rc = mcast_recv_ex(c, buf, cap, &len, &g, &source, &kind, TIMEOUT_MS);
        if (rc == MCAST_ETOOSMALL) {
            /* The message (or event) waits for a larger buffer. */
            char *bigger = realloc(buf, len);
            if (bigger == NULL) {
                free(buf);
                fprintf(stderr, "pubsub: out of memory\n");
                return 1;
            }
            buf = bigger;
            cap = len;
            grows++;
            continue;
        }
        if (rc != MCAST_OK) {
            char what[64];
            snprintf(what, sizeof what, "receiving message %u of %u", i, count);
            free(buf);
            return fail(c, what, rc);
        }
        if (kind == MCAST_MSG_MEMBERSHIP) {
            print_event(g, buf, len);
            print_notices(c);
            continue;
        }
        if (!check_message(i, group, g, buf, len)) {
            free(buf);
            return 1;
        }
        i++;
    }
    free(buf);
    if (send_ack(c, group, count) != 0)
        return 1;
    printf("sub: received %u messages intact (buffer grown %u times), acked\n", count, grows);
    return 0;
}

static int run_pub(mcast_client *c, uint32_t group, unsigned count, int batch) {
    char msg[256];
    for (unsigned i = 0; !batch && i < count; i++) {
        size_t len = make_message(i, msg);
        int rc = mcast_publish_blocking(c, group, msg, len, TIMEOUT_MS);
        if (rc != MCAST_OK) {
            char what[64];
            snprintf(what, sizeof what, "publishing message %u of %u", i, count);
            return fail(c, what, rc);
        }
    }
    if (batch && run_pub_batch(c, group, count) != 0)
        return 1;
    /* Wait for the subscriber's ack; print events, skip other data (a
     * daemon may deliver our own messages back to us). */
    char want[32], buf[256];
    int want_len = snprintf(want, sizeof want, "ack %u", count);
    for (;;) {
        size_t len = 0;
        uint32_t g = 0;
        int kind = MCAST_MSG_DATA;
        int rc = mcast_recv_ex(c, buf, sizeof buf, &len, &g, NULL, &kind, TIMEOUT_MS);
        if (rc == MCAST_ETOOSMALL) {
            /* Not an ack: take it into a buffer large enough. */
            char *big = malloc(len);
            if (big == NULL)
                return 1;
            rc = mcast_recv_ex(c, big, len, &len, &g, NULL, &kind, 0);
            if (rc == MCAST_OK && kind == MCAST_MSG_MEMBERSHIP) {
                print_event(g, big, len);
                print_notices(c);
            }
            free(big);
            if (rc != MCAST_OK)
                return fail(c, "receiving", rc);
            continue;
        }
        if (rc != MCAST_OK)
            return fail(c, "waiting for the subscriber's ack", rc);
        if (kind == MCAST_MSG_MEMBERSHIP) {
            print_event(g, buf, len);
            print_notices(c);
            continue;
        }
        if (len == (size_t)want_len && memcmp(buf, want, len) == 0)
            break;
        if (len >= 4 && memcmp(buf, "ack ", 4) == 0) {
            fprintf(stderr, "pubsub: subscriber sent \"%.*s\", want \"%s\"\n", (int)len, buf, want);
            return 1;
        }
    }
    printf("pub: published %u messages, subscriber acked all of them\n", count);
    return 0;
}

int main(int argc, char **argv) {
    int batch = argc == 6 && strcmp(argv[5], "batch") == 0;
    if ((argc != 5 && !batch) || (strcmp(argv[3], "pub") != 0 && strcmp(argv[3], "sub") != 0)) {
        fprintf(stderr, "usage: %s SOCKET GROUP pub|sub COUNT [batch]\n", argv[0]);
        return 2;
    }
    const char *socket = argv[1], *name = argv[2];
    role = argv[3];
    char *end;
    unsigned long count = strtoul(argv[4], &end, 10);
    if (*argv[4] == '\0' || *end != '\0' || count > 100000000UL) {
        fprintf(stderr, "pubsub: COUNT must be a number, got \"%s\"\n", argv[4]);
        return 2;
    }

    mcast_client *c = NULL;
    int rc = mcast_connect(socket, role, &c);
    if (rc != MCAST_OK)
        return fail(NULL, "connecting", rc);

    uint32_t group = 0, rank = 0;
    rc = mcast_join(c, name, &group, &rank);
    if (rc != MCAST_OK) {
        int status = fail(c, "joining", rc);
        mcast_close(c);
        return status;
    }
    printf("%s: joined %s as group %u, rank %u; max message %zu bytes\n", role, name, group, rank,
           mcast_max_message(c));
    fflush(stdout);
    print_notices(c);

    int status;
    if (strcmp(role, "sub") != 0)
        status = run_pub(c, group, (unsigned)count, batch);
    else if (batch)
        status = run_sub_batch(c, group, (unsigned)count);
    else
        status = run_sub(c, group, (unsigned)count);
    mcast_close(c);
    return status;
}
