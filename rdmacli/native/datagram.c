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

/* rdma-core's get_grh_header_version, in short: where the first word is not an IPv6 (or GRH)
 * version 6, an IPv4 header at RDMACLI_GRH_IP4 makes it RoCE v2 over IPv4; where it is, an
 * IPv4 header there still counts if its length and its checksum are right. */
static int grh_is_ipv4(const unsigned char *grh)
{
    const unsigned char *ip = grh + RDMACLI_GRH_IP4;
    uint32_t sum = 0;
    int i;

    if (grh[0] >> 4 != 6)
        return ip[0] >> 4 == 4;
    if (ip[0] != 0x45)
        return 0;
    for (i = 0; i < 20; i += 2)
        sum += i == 10 ? 0 : (uint32_t)ip[i] << 8 | ip[i + 1];
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum == ((uint32_t)ip[10] << 8 | ip[11]);
}

void rdmacli_source(const unsigned char *grh, int has_grh, uint32_t slid, unsigned char *out)
{
    memset(out, 0, RDMACLI_SOURCE_BYTES);
    if (has_grh && grh_is_ipv4(grh)) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, grh + RDMACLI_GRH_IP4 + 12, 4); /* the IPv4 header's source address */
    } else if (has_grh) {
        memcpy(out, grh + RDMACLI_GRH_SGID, 16);
    }
    out[16] = (unsigned char)(slid >> 8);
    out[17] = (unsigned char)slid;
}

static int zero(const unsigned char *p, size_t n)
{
    while (n--)
        if (*p++)
            return 0;
    return 1;
}

int rdmacli_same_source(const unsigned char *partner, const unsigned char *got)
{
    if (!zero(partner, 16) && !zero(got, 16))
        return memcmp(partner, got, 16) == 0;
    if (!zero(partner + 16, 2))
        return memcmp(partner + 16, got + 16, 2) == 0;
    return 0;
}
