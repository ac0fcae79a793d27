/* digest.c -- SHA-256 (FIPS 180-4, section 6.2), written from the
 * specification. Serialized executables carry it over their payload so a
 * corrupted blob is refused before a vendor deserializer sees any byte:
 * vendor loaders (XLA, OpenVINO, PopEF) trust their input and crash on
 * flipped bytes. SHA-256 rather than a 64-bit hash because the core's cache
 * already speaks SHA-256. Portable C runs at about 200 MB/s: 0.22 s for a
 * 47 MB executable, as long as OpenVINO's own import of it, so on x86-64
 * processors with the SHA extensions (Intel's SHA-NI: AMD since Zen, Intel
 * since Goldmont and Ice Lake) the blocks go through those instructions
 * (about 1.5 GB/s), chosen at run time by CPUID. Define
 * NXHAL_DIGEST_PORTABLE to build the portable path only (its tests). */
#include <string.h>

#include "nx_hal/nx_hal_plugin.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(NXHAL_DIGEST_PORTABLE)
#define NXHAL_DIGEST_SHANI 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* Section 4.2.2: the first 32 bits of the fractional parts of the cube roots
 * of the first 64 primes (computed from that definition, then checked
 * against the vectors in cabi/tests/test_helpers.c). */
static const uint32_t nxhal_sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u,
};

/* Section 5.3.3: the first 32 bits of the fractional parts of the square
 * roots of the first 8 primes. */
static const uint32_t nxhal_sha256_h0[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
    0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

static uint32_t nxhal_rotr(uint32_t x, unsigned n) {
  return (x >> n) | (x << (32u - n));
}

/* Section 6.2.2: one 512-bit block; big-endian words (section 3.1). */
static void nxhal_sha256_block(uint32_t state[8], const unsigned char* block) {
  uint32_t w[64];
  uint32_t a, b, c, d, e, f, g, h;
  unsigned t;
  for (t = 0; t < 16; t++) {
    w[t] = ((uint32_t)block[4 * t] << 24) | ((uint32_t)block[4 * t + 1] << 16) |
           ((uint32_t)block[4 * t + 2] << 8) | (uint32_t)block[4 * t + 3];
  }
  for (t = 16; t < 64; t++) {
    uint32_t s0 = nxhal_rotr(w[t - 15], 7) ^ nxhal_rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = nxhal_rotr(w[t - 2], 17) ^ nxhal_rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = s1 + w[t - 7] + s0 + w[t - 16];
  }
  a = state[0];
  b = state[1];
  c = state[2];
  d = state[3];
  e = state[4];
  f = state[5];
  g = state[6];
  h = state[7];
  for (t = 0; t < 64; t++) {
    uint32_t big_s1 = nxhal_rotr(e, 6) ^ nxhal_rotr(e, 11) ^ nxhal_rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + big_s1 + ch + nxhal_sha256_k[t] + w[t];
    uint32_t big_s0 = nxhal_rotr(a, 2) ^ nxhal_rotr(a, 13) ^ nxhal_rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = big_s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

#ifdef NXHAL_DIGEST_SHANI
/* Whether this processor has the SHA extensions and the SSSE3 and SSE4.1
 * instructions the block function also uses (CPUID leaf 7 EBX bit 29; leaf
 * 1 ECX bits 9 and 19). Asked on each call: no shared state to race on. */
static int nxhal_sha256_has_shani(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19))) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return (b & (1u << 29)) != 0;
}

/* `count` 512-bit blocks through the SHA extensions (Intel's "SHA
 * Extensions" reference: the state kept as ABEF and CDGH, two rounds per
 * SHA256RNDS2, the schedule by SHA256MSG1 and SHA256MSG2). The schedule is
 * kept in four registers, each group of four message words made while the
 * rounds of the group before run: the rounds' chain is the whole cost, and
 * no word spills to memory (a 16-entry array of them ran at 1.1 GB/s, this
 * at 1.5, as fast as OpenSSL's). */
#define NXHAL_SHA_ROUNDS4(m, k)                                                                  \
  do {                                                                                           \
    __m128i wk_ = _mm_add_epi32((m), _mm_loadu_si128((const __m128i*)&nxhal_sha256_k[4 * (k)])); \
    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk_);                                               \
    abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk_, 0x0E));                      \
  } while (0)
/* w[i+4] into m0 from w[i..i+3] in m0..m3 (FIPS 180-4, 6.2.2 step 1). */
#define NXHAL_SHA_SCHEDULE(m0, m1, m2, m3) \
  (m0) = _mm_sha256msg2_epu32(             \
      _mm_add_epi32(_mm_sha256msg1_epu32((m0), (m1)), _mm_alignr_epi8((m3), (m2), 4)), (m3))
__attribute__((target("sha,ssse3,sse4.1"))) static void nxhal_sha256_blocks_shani(
    uint32_t state[8], const unsigned char* p, size_t count) {
  /* Each 32-bit word's bytes reversed: the message words are big-endian. */
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&state[0]), 0xB1);
  __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&state[4]), 0x1B);
  __m128i abef = _mm_alignr_epi8(dcba, hgfe, 8);
  __m128i cdgh = _mm_blend_epi16(hgfe, dcba, 0xF0);
  unsigned j;
  for (; count > 0; count--, p += 64) {
    __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)p), swap);
    __m128i m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 16)), swap);
    __m128i m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 32)), swap);
    __m128i m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 48)), swap);
    for (j = 0; j < 12; j += 4) {
      NXHAL_SHA_ROUNDS4(m0, j);
      NXHAL_SHA_SCHEDULE(m0, m1, m2, m3);
      NXHAL_SHA_ROUNDS4(m1, j + 1);
      NXHAL_SHA_SCHEDULE(m1, m2, m3, m0);
      NXHAL_SHA_ROUNDS4(m2, j + 2);
      NXHAL_SHA_SCHEDULE(m2, m3, m0, m1);
      NXHAL_SHA_ROUNDS4(m3, j + 3);
      NXHAL_SHA_SCHEDULE(m3, m0, m1, m2);
    }
    NXHAL_SHA_ROUNDS4(m0, 12);
    NXHAL_SHA_ROUNDS4(m1, 13);
    NXHAL_SHA_ROUNDS4(m2, 14);
    NXHAL_SHA_ROUNDS4(m3, 15);
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  {
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i*)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i*)&state[4], _mm_alignr_epi8(dchg, feba, 8));
  }
}
#endif

/* `count` whole blocks at `p` into the state. */
static void nxhal_sha256_blocks(uint32_t state[8], const unsigned char* p, size_t count) {
#ifdef NXHAL_DIGEST_SHANI
  if (nxhal_sha256_has_shani()) {
    nxhal_sha256_blocks_shani(state, p, count);
    return;
  }
#endif
  for (; count > 0; count--, p += 64) nxhal_sha256_block(state, p);
}

void nxhal_sha256_init(nxhal_sha256_t* ctx) {
  memcpy(ctx->state, nxhal_sha256_h0, sizeof ctx->state);
  ctx->length = 0;
  ctx->used = 0;
}

void nxhal_sha256_update(nxhal_sha256_t* ctx, const void* data, size_t size) {
  const unsigned char* p = (const unsigned char*)data;
  ctx->length += (uint64_t)size;
  if (ctx->used > 0) {
    size_t take = 64 - ctx->used;
    if (take > size) take = size;
    memcpy(ctx->block + ctx->used, p, take);
    ctx->used += take;
    p += take;
    size -= take;
    if (ctx->used < 64) return;
    nxhal_sha256_blocks(ctx->state, ctx->block, 1);
    ctx->used = 0;
  }
  if (size >= 64) {
    nxhal_sha256_blocks(ctx->state, p, size / 64);
    p += size - size % 64;
    size %= 64;
  }
  if (size > 0) {
    memcpy(ctx->block, p, size);
    ctx->used = size;
  }
}

void nxhal_sha256_final(nxhal_sha256_t* ctx, uint8_t out[NXHAL_DIGEST_SIZE]) {
  /* Section 5.1.1: a 1 bit, zeros to 448 mod 512, the length in bits. */
  uint64_t bits = ctx->length * 8u;
  unsigned i;
  ctx->block[ctx->used++] = 0x80;
  if (ctx->used > 56) {
    memset(ctx->block + ctx->used, 0, 64 - ctx->used);
    nxhal_sha256_block(ctx->state, ctx->block);
    ctx->used = 0;
  }
  memset(ctx->block + ctx->used, 0, 56 - ctx->used);
  for (i = 0; i < 8; i++) ctx->block[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
  nxhal_sha256_block(ctx->state, ctx->block);
  for (i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(ctx->state[i] >> 24);
    out[4 * i + 1] = (uint8_t)(ctx->state[i] >> 16);
    out[4 * i + 2] = (uint8_t)(ctx->state[i] >> 8);
    out[4 * i + 3] = (uint8_t)ctx->state[i];
  }
  ctx->used = 0;
}

void nxhal_digest(const void* data, size_t size, uint8_t out[NXHAL_DIGEST_SIZE]) {
  nxhal_sha256_t ctx;
  nxhal_sha256_init(&ctx);
  nxhal_sha256_update(&ctx, data, size);
  nxhal_sha256_final(&ctx, out);
}

int nxhal_digest_equal(const uint8_t a[NXHAL_DIGEST_SIZE], const uint8_t b[NXHAL_DIGEST_SIZE]) {
  /* Whole-length compare: no early exit, so timing says nothing of where a
   * forged digest first differs. */
  unsigned diff = 0, i;
  for (i = 0; i < NXHAL_DIGEST_SIZE; i++) diff |= (unsigned)(a[i] ^ b[i]);
  return diff == 0;
}
