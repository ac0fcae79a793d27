/* manifest.c -- plugin manifests for the loader: a strict JSON reader for
 * flat objects of strings, the trust check, and resolving a manifest to the
 * library it names (without loading it). */
#define _POSIX_C_SOURCE 200809L /* strdup, fstat, dirent under -std=c99 */
#define _XOPEN_SOURCE 700       /* realpath (XSI) */
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A manifest is a few hundred bytes; anything far larger is not one. */
#define NXHAL_MANIFEST_MAX_BYTES 65536
#define NXHAL_JSON_MAX_MEMBERS 64

/* --- strings --------------------------------------------------------------- */

static char* nxhal_vaprintf(const char* format, va_list args) {
  va_list copy;
  int length;
  char* text;
  va_copy(copy, args);
  length = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (length < 0) return NULL;
  text = (char*)malloc((size_t)length + 1);
  if (text != NULL) vsnprintf(text, (size_t)length + 1, format, args);
  return text;
}

char* nxhal_aprintf(const char* format, ...) {
  va_list args;
  char* text;
  va_start(args, format);
  text = nxhal_vaprintf(format, args);
  va_end(args);
  return text;
}

void nxhal_strbuf_addf(nxhal_strbuf_t* buf, const char* format, ...) {
  va_list args;
  char* part;
  size_t n;
  va_start(args, format);
  part = nxhal_vaprintf(format, args);
  va_end(args);
  if (part == NULL) {
    buf->failed = 1;
    return;
  }
  n = strlen(part);
  if (buf->length + n + 1 > buf->capacity) {
    size_t capacity = buf->capacity ? buf->capacity : 256;
    char* bigger;
    while (buf->length + n + 1 > capacity) capacity *= 2;
    bigger = (char*)realloc(buf->data, capacity);
    if (bigger == NULL) {
      buf->failed = 1;
      free(part);
      return;
    }
    buf->data = bigger;
    buf->capacity = capacity;
  }
  memcpy(buf->data + buf->length, part, n + 1);
  buf->length += n;
  free(part);
}

/* --- the JSON reader ------------------------------------------------------- */

typedef struct nxhal_json_reader {
  const char* text;
  size_t size, pos;
} nxhal_json_reader_t;

static void nxhal_json_skip_space(nxhal_json_reader_t* r) {
  while (r->pos < r->size && (r->text[r->pos] == ' ' || r->text[r->pos] == '\t' ||
                              r->text[r->pos] == '\n' || r->text[r->pos] == '\r')) {
    ++r->pos;
  }
}

/* "line L, column C: <what>" at the reader's position (malloc'd). */
static char* nxhal_json_error(const nxhal_json_reader_t* r, const char* what) {
  size_t line = 1, column = 1, i;
  for (i = 0; i < r->pos && i < r->size; ++i) {
    if (r->text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return nxhal_aprintf("invalid JSON at line %zu, column %zu: %s", line, column, what);
}

static int nxhal_hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads 4 hex digits at r->pos; -1 if they are not. */
static long nxhal_json_hex4(nxhal_json_reader_t* r) {
  long value = 0;
  int i;
  if (r->size - r->pos < 4) return -1;
  for (i = 0; i < 4; ++i) {
    int digit = nxhal_hex_value(r->text[r->pos + (size_t)i]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  r->pos += 4;
  return value;
}

/* Appends code point `cp` as UTF-8; `out` has room (at most 4 bytes). */
static size_t nxhal_utf8_put(unsigned long cp, char* out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Reads a string at r->pos (which is at '"') into *out (malloc'd). NULL or a
 * reason. Decoded text is never longer than its escaped form, so the output
 * is sized by the input. */
static char* nxhal_json_string(nxhal_json_reader_t* r, char** out) {
  char* value = (char*)malloc(r->size - r->pos + 1);
  size_t n = 0;
  *out = NULL;
  if (value == NULL) return nxhal_aprintf("out of memory");
  ++r->pos; /* the opening quote */
  for (;;) {
    unsigned char c;
    if (r->pos >= r->size) {
      free(value);
      return nxhal_json_error(r, "unterminated string");
    }
    c = (unsigned char)r->text[r->pos];
    if (c == '"') {
      ++r->pos;
      break;
    }
    if (c < 0x20) {
      free(value);
      return nxhal_json_error(r, "control character in a string (escape it)");
    }
    if (c != '\\') {
      value[n++] = (char)c;
      ++r->pos;
      continue;
    }
    if (r->pos + 1 >= r->size) {
      free(value);
      return nxhal_json_error(r, "unterminated escape");
    }
    ++r->pos;
    switch (r->text[r->pos++]) {
      case '"': value[n++] = '"'; break;
      case '\\': value[n++] = '\\'; break;
      case '/': value[n++] = '/'; break;
      case 'b': value[n++] = '\b'; break;
      case 'f': value[n++] = '\f'; break;
      case 'n': value[n++] = '\n'; break;
      case 'r': value[n++] = '\r'; break;
      case 't': value[n++] = '\t'; break;
      case 'u': {
        long cp = nxhal_json_hex4(r);
        if (cp < 0) {
          free(value);
          return nxhal_json_error(r, "\\u needs 4 hex digits");
        }
        if (cp == 0) {
          /* A NUL would cut the C string short and change its meaning. */
          free(value);
          return nxhal_json_error(r, "\\u0000 is not allowed");
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          long low = -1;
          if (r->size - r->pos >= 6 && r->text[r->pos] == '\\' && r->text[r->pos + 1] == 'u') {
            r->pos += 2;
            low = nxhal_json_hex4(r);
          }
          if (low < 0xDC00 || low > 0xDFFF) {
            free(value);
            return nxhal_json_error(r, "unpaired UTF-16 surrogate in \\u escape");
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          free(value);
          return nxhal_json_error(r, "unpaired UTF-16 surrogate in \\u escape");
        }
        n += nxhal_utf8_put((unsigned long)cp, value + n);
        break;
      }
      default:
        --r->pos;
        free(value);
        return nxhal_json_error(
            r, "unknown escape (allowed: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
  }
  value[n] = '\0';
  *out = value;
  return NULL;
}

/* What a value that is not a string looks like, for the reason. */
static const char* nxhal_json_kind(char c) {
  switch (c) {
    case '{': return "an object";
    case '[': return "an array";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default: break;
  }
  return (c == '-' || (c >= '0' && c <= '9')) ? "a number" : "not a JSON value";
}

const char* nxhal_json_get(const nxhal_json_object_t* object, const char* key) {
  size_t i;
  for (i = 0; object != NULL && i < object->count; ++i) {
    if (strcmp(object->members[i].key, key) == 0) return object->members[i].value;
  }
  return NULL;
}

void nxhal_json_free(nxhal_json_object_t* object) {
  size_t i;
  if (object == NULL) return;
  for (i = 0; i < object->count; ++i) {
    free(object->members[i].key);
    free(object->members[i].value);
  }
  free(object->members);
  object->members = NULL;
  object->count = 0;
}

/* The body of nxhal_json_parse_flat; members are added to *out as read. */
static char* nxhal_json_parse_members(nxhal_json_reader_t* r, nxhal_json_object_t* out) {
  nxhal_json_skip_space(r);
  if (r->pos >= r->size || r->text[r->pos] != '{') {
    return nxhal_json_error(r, "expected '{' (a manifest is one JSON object)");
  }
  ++r->pos;
  nxhal_json_skip_space(r);
  if (r->pos < r->size && r->text[r->pos] == '}') {
    ++r->pos;
  } else {
    for (;;) {
      char* key = NULL;
      char* value = NULL;
      char* error;
      nxhal_json_skip_space(r);
      if (r->pos >= r->size || r->text[r->pos] != '"') {
        return nxhal_json_error(r, "expected a string key");
      }
      error = nxhal_json_string(r, &key);
      if (error != NULL) return error;
      if (nxhal_json_get(out, key) != NULL) {
        error = nxhal_aprintf("invalid JSON: key '%s' appears twice", key);
        free(key);
        return error;
      }
      nxhal_json_skip_space(r);
      if (r->pos >= r->size || r->text[r->pos] != ':') {
        free(key);
        return nxhal_json_error(r, "expected ':' after a key");
      }
      ++r->pos;
      nxhal_json_skip_space(r);
      if (r->pos >= r->size || r->text[r->pos] != '"') {
        error = r->pos >= r->size
                    ? nxhal_json_error(r, "expected a string value")
                    : nxhal_aprintf("the value of '%s' is %s; manifest values must be strings", key,
                                    nxhal_json_kind(r->text[r->pos]));
        free(key);
        return error;
      }
      error = nxhal_json_string(r, &value);
      if (error != NULL || out->count == NXHAL_JSON_MAX_MEMBERS) {
        free(key);
        free(value);
        return error != NULL ? error : nxhal_aprintf("more than %d keys", NXHAL_JSON_MAX_MEMBERS);
      }
      out->members[out->count].key = key;
      out->members[out->count].value = value;
      ++out->count;
      nxhal_json_skip_space(r);
      if (r->pos < r->size && r->text[r->pos] == ',') {
        ++r->pos;
        continue;
      }
      if (r->pos < r->size && r->text[r->pos] == '}') {
        ++r->pos;
        break;
      }
      return nxhal_json_error(r, "expected ',' or '}'");
    }
  }
  nxhal_json_skip_space(r);
  if (r->pos != r->size) return nxhal_json_error(r, "text after the closing '}'");
  return NULL;
}

char* nxhal_json_parse_flat(const char* text, size_t size, nxhal_json_object_t* out) {
  nxhal_json_reader_t reader;
  char* error;
  out->count = 0;
  out->members = (nxhal_json_member_t*)calloc(NXHAL_JSON_MAX_MEMBERS, sizeof(*out->members));
  if (out->members == NULL) return nxhal_aprintf("out of memory");
  reader.text = text;
  reader.size = size;
  reader.pos = 0;
  if (memchr(text, '\0', size) != NULL) {
    error = nxhal_aprintf("invalid JSON: contains a NUL byte");
  } else {
    error = nxhal_json_parse_members(&reader, out);
  }
  if (error != NULL) nxhal_json_free(out);
  return error;
}

/* --- trust ----------------------------------------------------------------- */

/* The trust rule on an already stat'ed path: a regular file (a directory
 * when `directory`) owned by this user or root and writable by no group or
 * other. nx_hal/library.py's plugin_path_untrusted says the same words. */
static char* nxhal_trust_check_stat(const char* path, const struct stat* info, int directory) {
  if (directory && !S_ISDIR(info->st_mode)) return nxhal_aprintf("'%s' is not a directory", path);
  if (!directory && !S_ISREG(info->st_mode)) {
    return nxhal_aprintf("'%s' is not a regular file", path);
  }
  if (info->st_uid != geteuid() && info->st_uid != 0) {
    return nxhal_aprintf("'%s' is owned by uid %u, not by this user (uid %u) or root", path,
                         (unsigned)info->st_uid, (unsigned)geteuid());
  }
  if ((info->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return nxhal_aprintf("'%s' is writable by group or others (mode %04o; chmod go-w to trust it)",
                         path, (unsigned)(info->st_mode & 07777));
  }
  return NULL;
}

char* nxhal_trust_check_path(const char* path, int directory) {
  struct stat info;
  char* real;
  char* parent;
  char* reason;
  if (directory) {
    /* A relative directory would make the working directory a source of code. */
    if (path[0] != '/') return nxhal_aprintf("'%s' is not an absolute directory", path);
    if (stat(path, &info) != 0) {
      return nxhal_aprintf("'%s' cannot be read: %s", path, strerror(errno));
    }
    return nxhal_trust_check_stat(path, &info, 1);
  }
  /* A symlink is judged by what it names: the file and the directory holding
   * it, since whoever may write that directory may replace the file. */
  real = realpath(path, NULL);
  if (real == NULL) return nxhal_aprintf("'%s' cannot be read: %s", path, strerror(errno));
  if (stat(real, &info) != 0) {
    reason = nxhal_aprintf("'%s' cannot be read: %s", real, strerror(errno));
  } else {
    reason = nxhal_trust_check_stat(real, &info, 0);
  }
  if (reason == NULL) {
    parent = nxhal_path_up(real, 1);
    reason = parent != NULL ? nxhal_trust_check_path(parent, 1) : nxhal_aprintf("out of memory");
    free(parent);
  }
  free(real);
  return reason;
}

/* --- manifests ------------------------------------------------------------- */

int nxhal_plugin_name_valid(const char* name) {
  size_t i, n = strlen(name);
  if (n == 0 || n > 128 || name[0] == '.') return 0;
  for (i = 0; i < n; ++i) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.')) {
      return 0;
    }
  }
  return 1;
}

/* Parses "MAJOR.MINOR" (digits only); 1 on success. */
static int nxhal_parse_version(const char* text, unsigned* major, unsigned* minor) {
  char* end;
  unsigned long a, b;
  if (text == NULL || !(text[0] >= '0' && text[0] <= '9')) return 0;
  a = strtoul(text, &end, 10);
  if (*end != '.' || !(end[1] >= '0' && end[1] <= '9')) return 0;
  b = strtoul(end + 1, &end, 10);
  if (*end != '\0' || a > 65535 || b > 65535) return 0;
  *major = (unsigned)a;
  *minor = (unsigned)b;
  return 1;
}

/* Reads the manifest file through one descriptor, so the file checked is the
 * file read. NULL and *out_text (malloc'd, *out_size bytes), or a reason. */
static char* nxhal_manifest_read(const char* path, char** out_text, size_t* out_size) {
  struct stat info;
  char* text;
  char* reason;
  size_t used = 0;
  int fd = open(path, O_RDONLY);
  *out_text = NULL;
  if (fd < 0) return nxhal_aprintf("cannot open: %s", strerror(errno));
  if (fstat(fd, &info) != 0) {
    reason = nxhal_aprintf("cannot stat: %s", strerror(errno));
    close(fd);
    return reason;
  }
  reason = nxhal_trust_check_stat(path, &info, 0);
  if (reason == NULL && info.st_size > NXHAL_MANIFEST_MAX_BYTES) {
    reason = nxhal_aprintf("larger than %d bytes: not a manifest", NXHAL_MANIFEST_MAX_BYTES);
  }
  if (reason != NULL) {
    close(fd);
    return reason;
  }
  text = (char*)malloc((size_t)info.st_size + 1);
  if (text == NULL) {
    close(fd);
    return nxhal_aprintf("out of memory");
  }
  while (used < (size_t)info.st_size) {
    ssize_t got = read(fd, text + used, (size_t)info.st_size - used);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    used += (size_t)got;
  }
  close(fd);
  text[used] = '\0';
  *out_text = text;
  *out_size = used;
  return NULL;
}

char* nxhal_path_up(const char* path, int count) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') --n;
  while (count-- > 0) {
    while (n > 0 && path[n - 1] != '/') --n; /* the component */
    while (n > 1 && path[n - 1] == '/') --n; /* its separator */
    if (n <= 1) return count == 0 && path[0] == '/' ? strdup("/") : NULL;
  }
  return strndup(path, n);
}

/* Numeric order of "python3.N" names, newest first. */
static int nxhal_compare_python_dirs(const void* a, const void* b) {
  const char* x = *(const char* const*)a;
  const char* y = *(const char* const*)b;
  long nx = strtol(x + 8, NULL, 10), ny = strtol(y + 8, NULL, 10);
  if (nx != ny) return nx > ny ? -1 : 1;
  return strcmp(x, y);
}

/* The first existing <base>/python3.*\/<leaf>/<relative>, newest Python
 * first; malloc'd, or NULL. */
static char* nxhal_find_in_python_dirs(const char* base, const char* leaf, const char* relative) {
  DIR* dir = opendir(base);
  struct dirent* entry;
  char* names[64];
  size_t count = 0, i;
  char* found = NULL;
  if (dir == NULL) return NULL;
  while ((entry = readdir(dir)) != NULL && count < 64) {
    if (strncmp(entry->d_name, "python3.", 8) != 0) continue;
    names[count] = strdup(entry->d_name);
    if (names[count] != NULL) ++count;
  }
  closedir(dir);
  qsort(names, count, sizeof(names[0]), nxhal_compare_python_dirs);
  for (i = 0; i < count; ++i) {
    if (found == NULL) {
      struct stat info;
      char* candidate = nxhal_aprintf("%s/%s/%s/%s", base, names[i], leaf, relative);
      if (candidate != NULL && stat(candidate, &info) == 0 && S_ISREG(info.st_mode)) {
        found = candidate;
      } else {
        free(candidate);
      }
    }
    free(names[i]);
  }
  return found;
}

/* "pkg.sub" -> "pkg/sub/<library>" (malloc'd), or NULL when either is not a
 * plain package name / relative file without "..". */
static char* nxhal_package_relative(const char* package, const char* library) {
  size_t i, n = strlen(package);
  char* relative;
  if (n == 0 || package[0] == '.' || package[n - 1] == '.' || library[0] == '\0' ||
      library[0] == '/' || strstr(library, "..") != NULL) {
    return NULL;
  }
  for (i = 0; i < n; ++i) {
    char c = package[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.')) {
      return NULL;
    }
  }
  relative = nxhal_aprintf("%s/%s", package, library);
  for (i = 0; relative != NULL && i < n; ++i) {
    if (relative[i] == '.') relative[i] = '/';
  }
  return relative;
}

/* Resolves the python_package form: the package is looked up in the
 * site-packages of the prefix the manifest was installed into (plugin
 * wheels are py3-none, so the Python version is not known in advance). */
static char* nxhal_resolve_package(const char* dir, const char* package, const char* library,
                                   char** out_library) {
  char* relative = nxhal_package_relative(package, library);
  char* prefix;
  char* reason = NULL;
  char* found = NULL;
  *out_library = NULL;
  if (relative == NULL) {
    return nxhal_aprintf(
        "'python_package' must be a dotted package name and 'library' a "
        "relative file name without '..' (got '%s', '%s')",
        package, library);
  }
  prefix = nxhal_path_up(dir, 3); /* <prefix>/share/nx_hal/plugins */
  if (prefix != NULL) {
    const char* root = strcmp(prefix, "/") == 0 ? "" : prefix;
    char* base = nxhal_aprintf("%s/lib", root);
    char* base64 = nxhal_aprintf("%s/lib64", root);
    char* local = nxhal_aprintf("%s/local/lib", root);
    if (base != NULL) found = nxhal_find_in_python_dirs(base, "site-packages", relative);
    if (found == NULL && base64 != NULL) {
      found = nxhal_find_in_python_dirs(base64, "site-packages", relative);
    }
    if (found == NULL && local != NULL) {
      found = nxhal_find_in_python_dirs(local, "dist-packages", relative);
    }
    if (found == NULL) {
      struct stat info;
      char* debian = nxhal_aprintf("%s/lib/python3/dist-packages/%s", root, relative);
      if (debian != NULL && stat(debian, &info) == 0) {
        found = debian;
      } else {
        free(debian);
      }
    }
    if (found == NULL) {
      reason = nxhal_aprintf(
          "python package library '%s' not found under %s/lib/python3.*/site-packages, "
          "%s/lib64/python3.*/site-packages, %s/local/lib/python3.*/dist-packages or "
          "%s/lib/python3/dist-packages (is the package installed in that environment?)",
          relative, root, root, root, root);
    }
    free(base);
    free(base64);
    free(local);
  } else {
    reason = nxhal_aprintf(
        "directory '%s' is not <prefix>/share/nx_hal/plugins, so "
        "'python_package' cannot be resolved",
        dir);
  }
  free(prefix);
  free(relative);
  if (found != NULL) {
    reason = nxhal_trust_check_path(found, 0);
    if (reason != NULL) {
      free(found);
      found = NULL;
    }
  }
  *out_library = found;
  return reason;
}

/* Resolves library_path: absolute, or relative to the manifest's directory. */
static char* nxhal_resolve_library_path(const char* dir, const char* library_path,
                                        char** out_library) {
  char* path;
  char* reason;
  struct stat info;
  *out_library = NULL;
  if (library_path[0] == '\0') return nxhal_aprintf("'library_path' is empty");
  path = library_path[0] == '/' ? strdup(library_path) : nxhal_aprintf("%s/%s", dir, library_path);
  if (path == NULL) return nxhal_aprintf("out of memory");
  if (stat(path, &info) != 0) {
    reason = nxhal_aprintf("library '%s' cannot be read: %s", path, strerror(errno));
  } else {
    reason = nxhal_trust_check_path(path, 0);
  }
  if (reason != NULL) {
    free(path);
    return reason;
  }
  *out_library = path;
  return NULL;
}

/* The checks on a parsed manifest, then resolution. */
static char* nxhal_manifest_check(const nxhal_json_object_t* json, const char* dir,
                                  const char* stem, unsigned host_abi_major,
                                  nxhal_manifest_t* out) {
  const char* format = nxhal_json_get(json, "file_format_version");
  const char* name = nxhal_json_get(json, "name");
  const char* abi = nxhal_json_get(json, "abi_version");
  const char* library_path = nxhal_json_get(json, "library_path");
  const char* package = nxhal_json_get(json, "python_package");
  const char* library = nxhal_json_get(json, "library");
  unsigned major, minor;
  if (format == NULL) return nxhal_aprintf("no 'file_format_version'");
  if (!nxhal_parse_version(format, &major, &minor) || major != 1) {
    return nxhal_aprintf("file_format_version '%s' is not 1.x, the only format this loader reads",
                         format);
  }
  if (name == NULL) return nxhal_aprintf("no 'name'");
  out->name = strdup(name);
  if (!nxhal_plugin_name_valid(name)) {
    return nxhal_aprintf("name '%s' is not a plugin name ([A-Za-z0-9._-], not starting with '.')",
                         name);
  }
  if (strcmp(name, stem) != 0) {
    return nxhal_aprintf("names plugin '%s' but the file is '%s.json' (they must match)", name,
                         stem);
  }
  if (abi == NULL) return nxhal_aprintf("no 'abi_version'");
  out->abi_version = strdup(abi);
  if (!nxhal_parse_version(abi, &major, &minor)) {
    return nxhal_aprintf("abi_version '%s' is not MAJOR.MINOR", abi);
  }
  if (major != host_abi_major) {
    return nxhal_aprintf(
        "states ABI %u.%u, the loader speaks ABI %u.x (major versions differ); "
        "not loaded",
        major, minor, host_abi_major);
  }
  if (library_path != NULL) return nxhal_resolve_library_path(dir, library_path, &out->library);
  if (package != NULL && library != NULL) {
    return nxhal_resolve_package(dir, package, library, &out->library);
  }
  return nxhal_aprintf(
      "names no library: needs 'library_path', or 'python_package' and "
      "'library'");
}

char* nxhal_manifest_load(const char* path, const char* dir, const char* stem,
                          unsigned host_abi_major, nxhal_manifest_t* out) {
  nxhal_json_object_t json;
  char* text = NULL;
  size_t size = 0;
  char* reason;
  memset(out, 0, sizeof(*out));
  reason = nxhal_manifest_read(path, &text, &size);
  if (reason != NULL) return reason;
  reason = nxhal_json_parse_flat(text, size, &json);
  free(text);
  if (reason != NULL) return reason;
  reason = nxhal_manifest_check(&json, dir, stem, host_abi_major, out);
  nxhal_json_free(&json);
  return reason;
}

void nxhal_manifest_free(nxhal_manifest_t* manifest) {
  if (manifest == NULL) return;
  free(manifest->name);
  free(manifest->abi_version);
  free(manifest->library);
  memset(manifest, 0, sizeof(*manifest));
}
