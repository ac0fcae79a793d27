/* mlir_signature.c -- the input signature of `@main` in StableHLO text.
 * PJRT states output types but not input types, so inputs are read from the
 * program; execute checks buffers against them before PJRT sees them. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int tpu_mlir_is_bytecode(const void* data, size_t size) {
  return size >= 4 && memcmp(data,
                             "ML\xef"
                             "R",
                             4) == 0;
}

void tpu_ios_free(tpu_io_t* ios, size_t count) {
  size_t i;
  if (ios == NULL) return;
  for (i = 0; i < count; ++i) {
    free(ios[i].name);
    free(ios[i].dims);
  }
  free(ios);
}

const char* tpu_mlir_find(const void* text, size_t size, const char* needle) {
  size_t m = strlen(needle), i;
  const char* s = (const char*)text;
  if (m > size) return NULL;
  for (i = 0; i + m <= size; ++i) {
    if (memcmp(s + i, needle, m) == 0) return s + i;
  }
  return NULL;
}

/* Finds `needle` in [s, s+n). */
static const char* tpu_memfind(const char* s, size_t n, const char* needle) {
  size_t m = strlen(needle), i;
  if (m > n) return NULL;
  for (i = 0; i + m <= n; ++i) {
    if (memcmp(s + i, needle, m) == 0) return s + i;
  }
  return NULL;
}

/* Parses "4x4xf32" / "f32" / "?x3xbf16" into an io. 0 on a malformed type. */
static int tpu_parse_tensor_type(const char* s, size_t n, tpu_io_t* io) {
  int64_t dims[64];
  int64_t rank = 0;
  size_t pos = 0;
  while (pos < n) {
    size_t start = pos;
    while (pos < n && s[pos] != 'x') ++pos;
    if (pos == n) {
      /* The last part is the element type. */
      io->dtype = tpu_dtype_from_mlir(s + start, n - start);
      if (io->dtype == NXHAL_DTYPE_INVALID) return 0;
      break;
    }
    if (rank >= 64) return 0;
    if (pos - start == 1 && s[start] == '?') {
      dims[rank++] = -1;
    } else {
      int64_t value = 0;
      size_t k;
      if (pos == start) return 0;
      for (k = start; k < pos; ++k) {
        /* An element type containing 'x' would land here; no supported one does. */
        if (!isdigit((unsigned char)s[k])) return 0;
        value = value * 10 + (s[k] - '0');
      }
      dims[rank++] = value;
    }
    ++pos;
  }
  io->rank = rank;
  io->dims = (int64_t*)malloc(sizeof(int64_t) * (size_t)(rank ? rank : 1));
  if (io->dims == NULL) return 0;
  memcpy(io->dims, dims, sizeof(int64_t) * (size_t)rank);
  return 1;
}

/* The "@main(" of the first line that also says "func" (public or private
 * function), or NULL: a call `@main(` elsewhere is not the definition. */
static const char* tpu_mlir_find_main(const char* text, const char* end) {
  const char* p = text;
  while (p < end) {
    const char* hit = tpu_memfind(p, (size_t)(end - p), "@main(");
    const char* line;
    if (hit == NULL) return NULL;
    line = hit;
    while (line > text && line[-1] != '\n') --line;
    if (tpu_memfind(line, (size_t)(hit - line), "func") != NULL) return hit;
    p = hit + 1;
  }
  return NULL;
}

/* The end of the argument starting at `p`: the ',' or ')' at its own
 * nesting depth (types nest <>, attributes {} and []), or `end`. */
static const char* tpu_mlir_arg_end(const char* p, const char* end) {
  int local = 0;
  while (p < end) {
    char c = *p;
    if (c == '(' || c == '<' || c == '{' || c == '[') ++local;
    if (c == ')' || c == '>' || c == '}' || c == ']') {
      if (local == 0 && c == ')') break;
      --local;
    }
    if (c == ',' && local == 0) break;
    ++p;
  }
  return p;
}

/* Reads one argument "%name: tensor<...> {attrs}" in [start, stop) into
 * *io. 0 when it has no tensor type (not an input we describe); an
 * unreadable type gives an io of unknown dtype and rank. */
static int tpu_mlir_parse_arg(const char* start, const char* stop, size_t index, tpu_io_t* io) {
  size_t n = (size_t)(stop - start);
  const char* tensor = tpu_memfind(start, n, "tensor<");
  const char* name = tpu_memfind(start, n, "%");
  const char* t;
  const char* close;
  if (tensor == NULL) return 0;
  t = tensor + 7;
  close = t;
  while (close < stop && *close != '>' && *close != ',') ++close;
  memset(io, 0, sizeof(*io));
  if (!tpu_parse_tensor_type(t, (size_t)(close - t), io)) {
    io->dtype = NXHAL_DTYPE_INVALID;
    io->rank = -1;
  }
  if (name != NULL) {
    const char* ne = name + 1;
    while (ne < stop && (isalnum((unsigned char)*ne) || *ne == '_')) ++ne;
    io->name = tpu_strndup(name + 1, (size_t)(ne - name - 1));
  } else {
    io->name = tpu_sprintf("input%zu", index);
  }
  return 1;
}

/* Appends `io` (taken) to a growing array. 0 on OOM, with `io` freed. */
static int tpu_ios_push(tpu_io_t** ios, size_t* count, size_t* capacity, tpu_io_t io) {
  if (*count == *capacity) {
    size_t grown = *capacity ? *capacity * 2 : 8;
    tpu_io_t* bigger = (tpu_io_t*)realloc(*ios, grown * sizeof(**ios));
    if (bigger == NULL) {
      free(io.name);
      free(io.dims);
      return 0;
    }
    *ios = bigger;
    *capacity = grown;
  }
  (*ios)[(*count)++] = io;
  return 1;
}

int tpu_mlir_main_inputs(const char* text, size_t size, tpu_io_t** out_ios, size_t* out_count) {
  const char* end = text + size;
  const char* p;
  tpu_io_t* ios = NULL;
  size_t count = 0, capacity = 0;
  *out_ios = NULL;
  *out_count = 0;
  if (tpu_mlir_is_bytecode(text, size)) return 0;
  p = tpu_mlir_find_main(text, end);
  if (p == NULL) return 0;
  p += 6; /* past "@main(" */
  while (p < end) {
    const char* arg_start = p;
    tpu_io_t io;
    p = tpu_mlir_arg_end(p, end);
    if (p >= end) break;
    if (tpu_mlir_parse_arg(arg_start, p, count, &io) &&
        !tpu_ios_push(&ios, &count, &capacity, io)) {
      tpu_ios_free(ios, count);
      return -1;
    }
    if (*p == ')') break;
    ++p; /* past ',' */
  }
  *out_ios = ios;
  *out_count = count;
  return 1;
}

char* tpu_signature_format(const tpu_io_t* ios, size_t count) {
  size_t cap = 64, used = 0, i;
  char* text = (char*)malloc(cap);
  if (text == NULL) return NULL;
  text[0] = '\0';
  for (i = 0; i < count; ++i) {
    char part[1024];
    int n = snprintf(part, sizeof(part), "%s%d:%lld:", i ? ";" : "", (int)ios[i].dtype,
                     (long long)ios[i].rank);
    int64_t d;
    for (d = 0; d < ios[i].rank && n < (int)sizeof(part) - 24; ++d) {
      n += snprintf(part + n, sizeof(part) - (size_t)n, "%s%lld", d ? "," : "",
                    (long long)ios[i].dims[d]);
    }
    if (used + (size_t)n + 1 > cap) {
      char* bigger;
      while (used + (size_t)n + 1 > cap) cap *= 2;
      bigger = (char*)realloc(text, cap);
      if (bigger == NULL) {
        free(text);
        return NULL;
      }
      text = bigger;
    }
    memcpy(text + used, part, (size_t)n + 1);
    used += (size_t)n;
  }
  return text;
}

int tpu_signature_parse(const char* text, tpu_io_t** out_ios, size_t* out_count) {
  size_t count = 0, i;
  const char* p = text;
  tpu_io_t* ios;
  *out_ios = NULL;
  *out_count = 0;
  if (*text == '\0') return 1;
  count = 1;
  for (p = text; *p; ++p) count += (*p == ';');
  ios = (tpu_io_t*)calloc(count, sizeof(*ios));
  if (ios == NULL) return 0;
  p = text;
  for (i = 0; i < count; ++i) {
    char* next;
    long dtype = strtol(p, &next, 10);
    long long rank, d;
    if (*next != ':') goto bad;
    rank = strtoll(next + 1, &next, 10);
    if (*next != ':' || rank < -1 || rank > 64) goto bad;
    p = next + 1;
    ios[i].dtype = (nxhal_dtype_t)dtype;
    ios[i].rank = rank;
    ios[i].name = tpu_sprintf("arg%zu", i);
    ios[i].dims = (int64_t*)calloc((size_t)(rank > 0 ? rank : 1), sizeof(int64_t));
    if (ios[i].name == NULL || ios[i].dims == NULL) goto bad;
    for (d = 0; d < rank; ++d) {
      ios[i].dims[d] = strtoll(p, &next, 10);
      if (next == p) goto bad;
      p = next;
      if (*p == ',') ++p;
    }
    if (*p == ';') ++p;
  }
  *out_ios = ios;
  *out_count = count;
  return 1;
bad:
  tpu_ios_free(ios, count);
  return 0;
}
