/*
 * manifest.h -- the loader's private view of plugin manifests (manifest.c):
 * a strict reader for flat JSON objects of strings, the trust check every
 * file the loader would load passes, and manifest resolution. Not installed;
 * nothing here crosses the ABI.
 */
#ifndef NXHAL_CABI_MANIFEST_H_
#define NXHAL_CABI_MANIFEST_H_

#include <stddef.h>

/* A growing, always NUL-terminated string. Zero-initialise; free `data`. */
typedef struct nxhal_strbuf {
  char* data;
  size_t length, capacity;
  int failed; /* an allocation failed: the text is truncated */
} nxhal_strbuf_t;

/* Appends printf-formatted text. Not thread-safe on one buffer. */
void nxhal_strbuf_addf(nxhal_strbuf_t* buf, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* malloc'd printf; NULL on OOM. Thread-safe. */
char* nxhal_aprintf(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* `path` without its last `count` components (malloc'd; "/" at the top),
 * or NULL when it has fewer. Trailing slashes are ignored. Thread-safe. */
char* nxhal_path_up(const char* path, int count);

/* One member of a flat JSON object; both strings owned by the object. */
typedef struct nxhal_json_member {
  char* key;
  char* value;
} nxhal_json_member_t;

typedef struct nxhal_json_object {
  nxhal_json_member_t* members; /* owned */
  size_t count;
} nxhal_json_object_t;

/* Parses `text` (`size` bytes) as one JSON object whose values are all
 * strings, with no duplicate keys. Returns NULL and fills *out, or a
 * malloc'd reason naming the line and column (out is then empty). The
 * caller frees *out with nxhal_json_free. Thread-safe. */
char* nxhal_json_parse_flat(const char* text, size_t size, nxhal_json_object_t* out);

/* The value of `key`, borrowed from the object, or NULL. Thread-safe. */
const char* nxhal_json_get(const nxhal_json_object_t* object, const char* key);

/* Frees what nxhal_json_parse_flat filled; leaves an empty object. */
void nxhal_json_free(nxhal_json_object_t* object);

/* The one trust rule for what the loader searches and loads. NULL when
 * `path` may be used, otherwise a malloc'd reason naming the path and why.
 * `directory`: an absolute directory owned by this user or root and
 * writable by no group or other. Otherwise a file: after symlinks are
 * resolved (realpath), a regular file owned by this user or root and
 * writable by no group or other, in a directory that passes the rule too.
 * Thread-safe. */
char* nxhal_trust_check_path(const char* path, int directory);

/* A manifest read and resolved. Strings owned by it. */
typedef struct nxhal_manifest {
  char* name;        /* the "name" field (NULL when unreadable) */
  char* abi_version; /* "1.1" */
  char* library;     /* the resolved library file, trusted */
} nxhal_manifest_t;

/* Reads the manifest at `path` (a "<stem>.json" file in `dir`), checks it
 * and its library against the trust rules and the host ABI major, and
 * resolves the library without loading it. Returns NULL and fills *out, or
 * a malloc'd reason (out->name may still be set). The caller frees *out with
 * nxhal_manifest_free in both cases. Thread-safe. */
char* nxhal_manifest_load(const char* path, const char* dir, const char* stem,
                          unsigned host_abi_major, nxhal_manifest_t* out);

void nxhal_manifest_free(nxhal_manifest_t* manifest);

/* Whether `name` is usable as a plugin name: 1..128 of [A-Za-z0-9._-], not
 * starting with '.'. */
int nxhal_plugin_name_valid(const char* name);

#endif /* NXHAL_CABI_MANIFEST_H_ */
