/* A scripted end of an eccl control connection for tests: plain loopback
 * sockets speaking the wire format (core/proto/wire.h), to play a master's
 * peers or a relay's parent and children frame by frame. Failures are
 * cmocka assertions. */
#ifndef ECCL_TESTS_RAW_PEER_H
#define ECCL_TESTS_RAW_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"
#include "proto/wire.h"

/* A listening socket on 127.0.0.1, any port; its address in addr. */
int raw_listen(char *addr, size_t len);
/* A connection to addr ("127.0.0.1:PORT"), retried for about 2 s, past
 * the opening handshake (raw_auth). */
int raw_dial(const char *addr);
/* The opening handshake (core/proto/auth.h) on fd, as the end that
 * dialled (1) or accepted (0), with the secret of this process's settings
 * (ECCL_AUTH_SECRET...; nothing where ECCL_AUTH=0); asserts it succeeds. */
void raw_auth(int fd, int dialer);
/* Encodes and writes one control message. */
void raw_send(int fd, const eccl_msg *m);
/* Whether the socket is readable within ms. */
int raw_readable(int fd, int ms);
/* Reads exactly n bytes (each piece within 5 s). */
void raw_read_full(int fd, uint8_t *p, size_t n);
/* The next frame, header included (heap; the caller frees it); its
 * header in *h. */
uint8_t *raw_read_frame(int fd, eccl_wire_header *h);
/* The next frame that is not a heartbeat, decoded into *m (which may
 * borrow from the frame); returns the frame, the caller frees it. */
uint8_t *raw_read_msg(int fd, eccl_msg *m);

/* The next message that is not a heartbeat, which must be of `type`; its
 * frame in *keep (the caller frees it). */
void raw_expect(int fd, uint16_t type, eccl_msg *m, uint8_t **keep);

/* A scripted member of a master's group: its connection, peer id, and its
 * ring's rank and epoch. */
typedef struct raw_member {
    int fd;
    uint64_t id;
    uint32_t rank;
    uint32_t epoch;
} raw_member;

/* Takes the member's RING and answers RING_READY. */
void raw_take_ring(raw_member *p);
/* A running master and n scripted members in one group, wired: the first
 * is accepted at once and votes the others in. They send no heartbeats
 * (peer_timeout 60 s) and listen nowhere (p2p 127.0.0.1:41000+i). */
eccl_master *raw_group_start(raw_member *p, int n);
/* Closes the members still open and the master. */
void raw_group_stop(eccl_master *mst, raw_member *p, int n);

#endif /* ECCL_TESTS_RAW_PEER_H */
