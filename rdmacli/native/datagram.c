/* The probe's datagram on the wire (datapath.h's RDMACLI_DG_* offsets; rdmacli/probe/wire.py
 * reads the same lines): big-endian fields, tagged with SipHash-2-4 under the key. probe.c packs
 * and parses with these; Python calls them too where it checks the two agree. */
#include <stdint.h>
#include <string.h>

#include "datapath.h"

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    int i;

    for (i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                 \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                 \
    } while (0)

/* SipHash-2-4, as the reference (github.com/veorq/SipHash, CC0) computes it: a datagram's tag
 * costs tens of nanoseconds, nothing beside the round trips it stamps (a tag by HMAC-SHA-256
 * through OpenSSL's one-shot call cost microseconds, inside the measured time). */
uint64_t rdmacli_siphash24(const unsigned char *key, const unsigned char *in, size_t len)
{
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t b = (uint64_t)len << 56, m;
    size_t i, left = len & 7, end = len - left;

    for (i = 0; i < end; i += 8) {
        m = le64(in + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (i = 0; i < left; i++)
        b |= (uint64_t)in[end + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

int rdmacli_datagram_parse(const unsigned char *p, const unsigned char *key, struct rdmacli_datagram *d)
{
    if (get32(p) != RDMACLI_DG_MAGIC)
        return 0;
    d->kind = p[RDMACLI_DG_KIND];
    if (d->kind != RDMACLI_PROBE && d->kind != RDMACLI_REPLY)
        return 0;
    if (get64(p + RDMACLI_DG_TAG) != rdmacli_siphash24(key, p, RDMACLI_DG_TAG))
        return -1;
    memcpy(d->run, p + RDMACLI_DG_RUN, 8);
    d->seq = get32(p + RDMACLI_DG_SEQ);
    d->src = get32(p + RDMACLI_DG_SRC);
    d->dst = get32(p + RDMACLI_DG_DST);
    d->t1 = get64(p + RDMACLI_DG_T1);
    d->t2 = get64(p + RDMACLI_DG_T2);
    d->t3 = get64(p + RDMACLI_DG_T3);
    return 1;
}

void rdmacli_datagram_pack(unsigned char *p, const unsigned char *key, const struct rdmacli_datagram *d)
{
    memset(p, 0, RDMACLI_PROBE_PAYLOAD);
    put32(p, RDMACLI_DG_MAGIC);
    p[RDMACLI_DG_KIND] = (unsigned char)d->kind;
    memcpy(p + RDMACLI_DG_RUN, d->run, 8);
    put32(p + RDMACLI_DG_SEQ, d->seq);
    put32(p + RDMACLI_DG_SRC, d->src);
    put32(p + RDMACLI_DG_DST, d->dst);
    put64(p + RDMACLI_DG_T1, d->t1);
    put64(p + RDMACLI_DG_T2, d->t2);
    put64(p + RDMACLI_DG_T3, d->t3);
    put64(p + RDMACLI_DG_TAG, rdmacli_siphash24(key, p, RDMACLI_DG_TAG));
}
