/* sealed.c -- serialized executables sealed with this user's key, the rule
 * and format of nx_hal/store/sealed.py and nx_hal/store/secret.py, so blobs
 * move between Python and C/C++ both ways. A serialized executable is native
 * code (XLA CPU's is machine code): a digest anyone can recompute proves
 * nothing about who made it, so a blob carries an HMAC-SHA-256 (RFC 2104)
 * keyed by 32 random bytes only this user can read. The key file's path,
 * its creation (O_EXCL) and the checks on every read follow secret.py and
 * location.py step for step; a difference would lock one language out of the
 * other's key, or let one trust a file the other refuses. */
#define _XOPEN_SOURCE 700 /* openat, faccessat, S_ISVTX under -std=c99 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest.h"
#include "nx_hal/nx_hal_loader.h"
#include "nx_hal/nx_hal_plugin.h"

#define NXHAL_SEAL_API NXHAL_EXPORT

#define NXHAL_KEY_BYTES 32
#define NXHAL_KEY_HEX (2 * NXHAL_KEY_BYTES)
#define NXHAL_HMAC_BLOCK 64
#define NXHAL_KEY_NAME "secret"
#define NXHAL_DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define NXHAL_FILE_FLAGS (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)

/* sealed.py's _DOMAIN, b"nx_hal executable 1\0": the array's own NUL ends it. */
static const char nxhal_seal_domain[] = "nx_hal executable 1";

#define NXHAL_REFUSING "refusing to load a serialized executable: "
#define NXHAL_RUNS_NATIVE                                                                    \
  ". A serialized executable is native code and runs with this process's rights, like a "    \
  "pickle; pass trusted (nxhal::trusted in C++, trusted=1 to nxhal_executable_unseal in C, " \
  "trusted=True in Python) only for bytes from a source you trust"

/* memset that the compiler may not drop: keys do not outlive their use. */
static void nxhal_wipe(void* memory, size_t size) {
  volatile unsigned char* p = (volatile unsigned char*)memory;
  while (size-- > 0) *p++ = 0;
}

/* --- HMAC-SHA-256, RFC 2104 ------------------------------------------------ */

typedef struct nxhal_hmac {
  nxhal_sha256_t inner;
  unsigned char outer_pad[NXHAL_HMAC_BLOCK]; /* K xor opad */
} nxhal_hmac_t;

static void nxhal_hmac_init(nxhal_hmac_t* mac, const uint8_t* key, size_t key_size) {
  unsigned char block[NXHAL_HMAC_BLOCK], inner_pad[NXHAL_HMAC_BLOCK];
  size_t i;
  memset(block, 0, sizeof block);
  if (key_size > NXHAL_HMAC_BLOCK) {
    nxhal_digest(key, key_size, block); /* a key longer than a block is hashed first */
  } else {
    memcpy(block, key, key_size);
  }
  for (i = 0; i < NXHAL_HMAC_BLOCK; i++) {
    inner_pad[i] = (unsigned char)(block[i] ^ 0x36u);
    mac->outer_pad[i] = (unsigned char)(block[i] ^ 0x5cu);
  }
  nxhal_sha256_init(&mac->inner);
  nxhal_sha256_update(&mac->inner, inner_pad, sizeof inner_pad);
  nxhal_wipe(block, sizeof block);
  nxhal_wipe(inner_pad, sizeof inner_pad);
}

static void nxhal_hmac_final(nxhal_hmac_t* mac, uint8_t out[NXHAL_DIGEST_SIZE]) {
  uint8_t inner[NXHAL_DIGEST_SIZE];
  nxhal_sha256_t outer;
  nxhal_sha256_final(&mac->inner, inner);
  nxhal_sha256_init(&outer);
  nxhal_sha256_update(&outer, mac->outer_pad, sizeof mac->outer_pad);
  nxhal_sha256_update(&outer, inner, sizeof inner);
  nxhal_sha256_final(&outer, out);
  nxhal_wipe(mac, sizeof *mac);
  nxhal_wipe(&outer, sizeof outer);
}

/* secret.tag(_DOMAIN, payload): the domain, then the one part length-prefixed
 * (8 bytes, little-endian). */
static void nxhal_seal_tag(const uint8_t key[NXHAL_KEY_BYTES], const void* payload, size_t size,
                           uint8_t out[NXHAL_SEAL_TAG_SIZE]) {
  nxhal_hmac_t mac;
  unsigned char length[8];
  unsigned i;
  for (i = 0; i < 8; i++) length[i] = (unsigned char)((uint64_t)size >> (8 * i));
  nxhal_hmac_init(&mac, key, NXHAL_KEY_BYTES);
  nxhal_sha256_update(&mac.inner, nxhal_seal_domain, sizeof nxhal_seal_domain);
  nxhal_sha256_update(&mac.inner, length, sizeof length);
  nxhal_sha256_update(&mac.inner, payload, size);
  nxhal_hmac_final(&mac, out);
}

/* --- Where the key lives: nx_hal/store/location.py -------------------------- */

/* `name` when set to an absolute path (the XDG rules ignore relative ones). */
static const char* nxhal_env_absolute(const char* name) {
  const char* value = getenv(name);
  return value != NULL && value[0] == '/' ? value : NULL;
}

/* Lexically, in place: no repeated '/', no "." component, no trailing '/',
 * and with `parent_too`, ".." takes the component before it (os.path.normpath;
 * without it, as pathlib.Path keeps ".."). Only comparisons see the difference. */
static void nxhal_path_normalize(char* path, int parent_too) {
  char* out = path + 1;
  const char* in = path + 1;
  const char* end = path + strlen(path); /* writing a '/' may overwrite the NUL */
  if (path[0] != '/') return;
  while (in < end) {
    size_t length = strcspn(in, "/");
    if (length == 0 || (length == 1 && in[0] == '.')) {
      /* nothing to keep */
    } else if (parent_too && length == 2 && in[0] == '.' && in[1] == '.') {
      if (out > path + 1) out--;
      while (out > path + 1 && out[-1] != '/') out--;
    } else {
      memmove(out, in, length);
      out += length;
      *out++ = '/';
    }
    in += length + 1;
  }
  if (out > path + 1) out--; /* the last '/' written */
  *out = '\0';
}

/* tempfile.gettempdir(): the first of $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp,
 * /usr/tmp and the working directory that is a directory this user may write
 * in, made absolute as os.path.abspath makes it. malloc'd; NULL on OOM. */
static char* nxhal_temp_dir(void) {
  const char* candidates[] = {getenv("TMPDIR"), getenv("TEMP"), getenv("TMP"),
                              "/tmp",           "/var/tmp",     "/usr/tmp"};
  char cwd[4096];
  size_t i;
  int have_cwd = getcwd(cwd, sizeof cwd) != NULL;
  for (i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    const char* dir = candidates[i];
    char* absolute;
    struct stat info;
    if (dir == NULL || dir[0] == '\0' || (dir[0] != '/' && !have_cwd)) continue;
    absolute = dir[0] == '/' ? nxhal_aprintf("%s", dir) : nxhal_aprintf("%s/%s", cwd, dir);
    if (absolute == NULL) return NULL;
    nxhal_path_normalize(absolute, 1);
    if (stat(absolute, &info) == 0 && S_ISDIR(info.st_mode) &&
        faccessat(AT_FDCWD, absolute, W_OK | X_OK, AT_EACCESS) == 0) {
      return absolute;
    }
    free(absolute);
  }
  return have_cwd ? nxhal_aprintf("%s", cwd) : NULL;
}

/* per_user_dir(): under $XDG_RUNTIME_DIR, else the temporary directory. */
static char* nxhal_per_user_dir(void) {
  const char* runtime = nxhal_env_absolute("XDG_RUNTIME_DIR");
  char *base, *dir;
  if (runtime != NULL) {
    base = nxhal_aprintf("%s", runtime);
  } else {
    base = nxhal_temp_dir();
  }
  if (base == NULL) return NULL;
  dir = nxhal_aprintf("%s/nx_hal-%lu", base, (unsigned long)geteuid());
  free(base);
  if (dir != NULL) nxhal_path_normalize(dir, 0);
  return dir;
}

/* config_dir(): $XDG_CONFIG_HOME/nx_hal, $HOME/.config/nx_hal, else the
 * per-user directory's "config". malloc'd; NULL on OOM. */
static char* nxhal_config_dir(void) {
  const char* xdg = nxhal_env_absolute("XDG_CONFIG_HOME");
  const char* home = nxhal_env_absolute("HOME");
  char* dir;
  if (xdg != NULL) {
    dir = nxhal_aprintf("%s/nx_hal", xdg);
  } else if (home != NULL) {
    dir = nxhal_aprintf("%s/.config/nx_hal", home);
  } else {
    char* base = nxhal_per_user_dir();
    dir = base != NULL ? nxhal_aprintf("%s/config", base) : NULL;
    free(base);
  }
  if (dir != NULL) nxhal_path_normalize(dir, 0);
  return dir;
}

/* `path`, and the directories above it, as `mkdir -p` makes them: the last
 * with `mode`, the others 0777 (both less the umask). 0, or -1 with errno. */
static int nxhal_make_dirs(char* path, mode_t mode) {
  char* slash = path;
  struct stat info;
  while ((slash = strchr(slash + 1, '/')) != NULL) {
    *slash = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
      *slash = '/';
      return -1;
    }
    *slash = '/';
  }
  if (mkdir(path, mode) != 0 && errno != EEXIST) return -1;
  if (stat(path, &info) != 0) return -1;
  if (!S_ISDIR(info.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* untrusted_per_user_dir(): why `folder`, when it lies in the per-user
 * directory (chosen in a shared place, where another user may have made it,
 * or a link by its name, first), may not be used; NULL when it may. */
static char* nxhal_untrusted_per_user_dir(const char* folder) {
  char* base = nxhal_per_user_dir();
  size_t length;
  struct stat info;
  char* why = NULL;
  if (base == NULL) return nxhal_aprintf("out of memory");
  length = strlen(base);
  if (strncmp(folder, base, length) != 0 || (folder[length] != '\0' && folder[length] != '/')) {
    free(base);
    return NULL;
  }
  if (nxhal_make_dirs(base, 0700) != 0 || lstat(base, &info) != 0) {
    why = nxhal_aprintf("%s: %s", base, strerror(errno));
  } else if (S_ISLNK(info.st_mode) || !S_ISDIR(info.st_mode)) {
    why = nxhal_aprintf("%s is not a directory (a symbolic link, or another file, was there first)",
                        base);
  } else if (info.st_uid != geteuid() || (info.st_mode & 022) != 0) {
    why = nxhal_aprintf(
        "%s is owned by uid %lu with mode %o; nx_hal's per-user directory must be this user's "
        "(uid %lu) and writable by no one else",
        base, (unsigned long)info.st_uid, (unsigned)(info.st_mode & 07777),
        (unsigned long)geteuid());
  }
  free(base);
  return why;
}

/* --- The key file: nx_hal/store/trust.py and secret.py ---------------------- */

/* untrusted_dir(): why a directory (its fstat) is not to be trusted, or NULL. */
static char* nxhal_untrusted_dir(const struct stat* info) {
  if (!S_ISDIR(info->st_mode)) return nxhal_aprintf("it is not a directory");
  if (info->st_uid != geteuid()) {
    return nxhal_aprintf("it is owned by uid %lu, not by this user (uid %lu)",
                         (unsigned long)info->st_uid, (unsigned long)geteuid());
  }
  if ((info->st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info->st_mode & S_ISVTX) == 0) {
    return nxhal_aprintf(
        "group or others may write to it (mode %o) and could plant entries this process would "
        "trust",
        (unsigned)(info->st_mode & 07777));
  }
  return NULL;
}

/* The key file's fstat: untrusted_file(), then secret._read's own rules. */
static char* nxhal_untrusted_key_file(const struct stat* info) {
  if (!S_ISREG(info->st_mode)) return nxhal_aprintf("it is not a regular file");
  if (info->st_uid != geteuid()) {
    return nxhal_aprintf("it is owned by uid %lu, not by this user", (unsigned long)info->st_uid);
  }
  if ((info->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return nxhal_aprintf("group or others may write to it (mode %o)",
                         (unsigned)(info->st_mode & 07777));
  }
  if ((info->st_mode & 077) != 0) {
    return nxhal_aprintf("others may read it (mode %o); fix: chmod 600",
                         (unsigned)(info->st_mode & 0777));
  }
  if (info->st_size != NXHAL_KEY_HEX) {
    return nxhal_aprintf("it holds %lld bytes, not the %d hex digits nx_hal writes",
                         (long long)info->st_size, NXHAL_KEY_HEX);
  }
  return NULL;
}

/* `name` under `parent` opened as a trusted directory, made 0700 if missing
 * (trust.make_dir). A descriptor, or -1 with *why set. */
static int nxhal_make_dir(int parent, const char* name, char** why) {
  int attempt, fd = -1;
  struct stat info;
  for (attempt = 0; attempt < 2 && fd < 0; attempt++) {
    fd = openat(parent, name, NXHAL_DIR_FLAGS);
    if (fd < 0 && errno == ENOENT && attempt == 0) {
      if (mkdirat(parent, name, 0700) != 0 && errno != EEXIST) break;
    } else if (fd < 0) {
      break;
    }
  }
  if (fd < 0) {
    *why = nxhal_aprintf("%s: %s", name, strerror(errno));
    return -1;
  }
  if (fstat(fd, &info) != 0) {
    *why = nxhal_aprintf("%s: %s", name, strerror(errno));
  } else {
    char* reason = nxhal_untrusted_dir(&info);
    if (reason == NULL) return fd;
    *why = nxhal_aprintf("%s: %s", name, reason);
    free(reason);
  }
  close(fd);
  return -1;
}

/* secret._open_parent(): the key's directory, made private if missing (its
 * parents as `mkdir -p` makes them). A descriptor, or -1 with *why set. */
static int nxhal_open_key_dir(const char* folder, char** why) {
  char* parent = nxhal_path_up(folder, 1);
  const char* name = strrchr(folder, '/') + 1; /* folder is absolute */
  int parent_fd, fd = -1;
  *why = nxhal_untrusted_per_user_dir(folder);
  if (*why != NULL) {
    free(parent);
    return -1;
  }
  if (parent == NULL) {
    *why = nxhal_aprintf("%s has no parent directory", folder);
    return -1;
  }
  if (nxhal_make_dirs(parent, 0777) != 0 ||
      (parent_fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    *why = nxhal_aprintf("%s: %s", parent, strerror(errno));
  } else {
    fd = nxhal_make_dir(parent_fd, name, why);
    close(parent_fd);
  }
  free(parent);
  return fd;
}

static int nxhal_hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* secret._read(): 1 with the key, 0 when there is no key file, -1 with *why. */
static int nxhal_read_key(int dir_fd, uint8_t key[NXHAL_KEY_BYTES], char** why) {
  char text[NXHAL_KEY_HEX + 1];
  struct stat info;
  ssize_t got = 0, n = 0;
  int fd = openat(dir_fd, NXHAL_KEY_NAME, NXHAL_FILE_FLAGS), i;
  if (fd < 0 && errno == ENOENT) return 0;
  if (fd < 0) {
    *why = errno == ELOOP ? nxhal_aprintf("it is a symbolic link, which is never followed")
                          : nxhal_aprintf("%s", strerror(errno));
    return -1;
  }
  *why = fstat(fd, &info) != 0 ? nxhal_aprintf("%s", strerror(errno))
                               : nxhal_untrusted_key_file(&info);
  /* A bounded read: one byte more than a key shows a file that grew since. */
  while (*why == NULL && got < (ssize_t)sizeof text &&
         ((n = read(fd, text + got, sizeof text - (size_t)got)) > 0 || (n < 0 && errno == EINTR))) {
    if (n > 0) got += n;
  }
  if (*why == NULL && n < 0) *why = nxhal_aprintf("%s", strerror(errno));
  close(fd);
  for (i = 0; *why == NULL && i < NXHAL_KEY_BYTES; i++) {
    int high = got == NXHAL_KEY_HEX ? nxhal_hex_value(text[2 * i]) : -1;
    int low = got == NXHAL_KEY_HEX ? nxhal_hex_value(text[2 * i + 1]) : -1;
    if (high < 0 || low < 0) {
      *why = nxhal_aprintf("it does not hold %d hex digits", NXHAL_KEY_HEX);
    } else {
      key[i] = (uint8_t)(high * 16 + low);
    }
  }
  nxhal_wipe(text, sizeof text);
  return *why == NULL ? 1 : -1;
}

/* 32 bytes of the kernel's random generator, as 64 lower-case hex digits. */
static int nxhal_random_hex(char out[NXHAL_KEY_HEX]) {
  static const char digits[] = "0123456789abcdef";
  unsigned char bytes[NXHAL_KEY_BYTES];
  size_t got = 0, i;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  while (got < sizeof bytes) {
    ssize_t n = read(fd, bytes + got, sizeof bytes - got);
    if (n <= 0 && !(n < 0 && errno == EINTR)) break;
    if (n > 0) got += (size_t)n;
  }
  close(fd);
  for (i = 0; i < NXHAL_KEY_BYTES; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  nxhal_wipe(bytes, sizeof bytes);
  if (got < sizeof bytes) errno = EIO;
  return got == sizeof bytes ? 0 : -1;
}

/* secret._create(): a new key, O_EXCL so that two processes starting at once
 * agree on one (the loser reads the winner's). NULL, or why not. */
static char* nxhal_create_key(int dir_fd) {
  char text[NXHAL_KEY_HEX];
  size_t put = 0;
  int error = 0;
  int fd =
      openat(dir_fd, NXHAL_KEY_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno == EEXIST ? NULL : nxhal_aprintf("%s", strerror(errno));
  if (nxhal_random_hex(text) != 0) error = errno;
  while (error == 0 && put < sizeof text) {
    ssize_t n = write(fd, text + put, sizeof text - put);
    if (n > 0) {
      put += (size_t)n;
    } else if (n == 0 || errno != EINTR) {
      error = n == 0 ? EIO : errno;
    }
  }
  nxhal_wipe(text, sizeof text);
  if (close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    unlinkat(dir_fd, NXHAL_KEY_NAME, 0); /* half a key would lock every later start out */
    return nxhal_aprintf("%s", strerror(error));
  }
  return NULL;
}

/* secret.key(): this user's key, made on first use. NULL, or a malloc'd
 * reason naming the key file. */
static char* nxhal_load_key(uint8_t key[NXHAL_KEY_BYTES]) {
  char* folder = nxhal_config_dir();
  char *why = NULL, *message;
  int dir_fd, found = -1;
  if (folder == NULL) return nxhal_aprintf("out of memory");
  dir_fd = nxhal_open_key_dir(folder, &why);
  if (dir_fd >= 0) {
    found = nxhal_read_key(dir_fd, key, &why);
    if (found == 0) {
      why = nxhal_create_key(dir_fd);
      if (why == NULL) found = nxhal_read_key(dir_fd, key, &why);
      if (found == 0 && why == NULL) why = nxhal_aprintf("it vanished as it was made");
    }
    close(dir_fd);
  }
  if (found == 1) {
    free(folder);
    return NULL;
  }
  message =
      nxhal_aprintf("%s/" NXHAL_KEY_NAME " (%s)", folder, why != NULL ? why : "out of memory");
  free(why);
  free(folder);
  return message;
}

/* --- The exported functions ------------------------------------------------- */

NXHAL_SEAL_API nxhal_status_t* nxhal_executable_key_path(char** out_path) {
  char* folder;
  if (out_path == NULL) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT, "nxhal_executable_key_path: out_path is NULL");
  }
  *out_path = NULL;
  folder = nxhal_config_dir();
  *out_path = folder != NULL ? nxhal_aprintf("%s/" NXHAL_KEY_NAME, folder) : NULL;
  free(folder);
  return *out_path != NULL ? NULL : nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory");
}

NXHAL_SEAL_API nxhal_status_t* nxhal_executable_seal(const void* blob, size_t size,
                                                     void** out_sealed, size_t* out_size) {
  uint8_t key[NXHAL_KEY_BYTES];
  unsigned char* sealed;
  char* why;
  if (out_sealed == NULL || out_size == NULL || (blob == NULL && size > 0)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "nxhal_executable_seal: blob, out_sealed or out_size is NULL");
  }
  *out_sealed = NULL;
  *out_size = 0;
  if (size > SIZE_MAX - NXHAL_SEAL_HEADER_SIZE) {
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "a blob of %zu bytes cannot be sealed",
                             size);
  }
  why = nxhal_load_key(key);
  if (why != NULL) {
    nxhal_status_t* status =
        nxhal_status_make(NXHAL_FAILED_PRECONDITION,
                          "cannot seal a serialized executable: cannot use the key in %s", why);
    free(why);
    return status;
  }
  sealed = (unsigned char*)malloc(NXHAL_SEAL_HEADER_SIZE + size);
  if (sealed == NULL) {
    nxhal_wipe(key, sizeof key);
    return nxhal_status_make(NXHAL_RESOURCE_EXHAUSTED, "out of memory sealing %zu bytes", size);
  }
  memcpy(sealed, NXHAL_SEAL_MAGIC, NXHAL_SEAL_MAGIC_SIZE);
  nxhal_seal_tag(key, blob, size, sealed + NXHAL_SEAL_MAGIC_SIZE);
  nxhal_wipe(key, sizeof key);
  if (size > 0) memcpy(sealed + NXHAL_SEAL_HEADER_SIZE, blob, size);
  *out_sealed = sealed;
  *out_size = NXHAL_SEAL_HEADER_SIZE + size;
  return NULL;
}

/* Whether `data` is sealed and its tag checks with this user's key; *why is
 * set when the key could not be used. */
static int nxhal_seal_checks(const unsigned char* data, size_t size, char** why) {
  uint8_t key[NXHAL_KEY_BYTES], tag[NXHAL_SEAL_TAG_SIZE];
  int equal;
  *why = nxhal_load_key(key);
  if (*why != NULL) return 0;
  nxhal_seal_tag(key, data + NXHAL_SEAL_HEADER_SIZE, size - NXHAL_SEAL_HEADER_SIZE, tag);
  nxhal_wipe(key, sizeof key);
  equal = nxhal_digest_equal(tag, data + NXHAL_SEAL_MAGIC_SIZE); /* constant time */
  nxhal_wipe(tag, sizeof tag);
  return equal;
}

NXHAL_SEAL_API nxhal_status_t* nxhal_executable_unseal(const void* data, size_t size, int trusted,
                                                       const void** out_payload,
                                                       size_t* out_payload_size) {
  const unsigned char* bytes = (const unsigned char*)data;
  int sealed;
  char* why = NULL;
  nxhal_status_t* status;
  if (out_payload == NULL || out_payload_size == NULL || (data == NULL && size > 0)) {
    return nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                             "nxhal_executable_unseal: data, out_payload or out_payload_size is "
                             "NULL");
  }
  *out_payload = NULL;
  *out_payload_size = 0;
  sealed =
      size >= NXHAL_SEAL_HEADER_SIZE && memcmp(bytes, NXHAL_SEAL_MAGIC, NXHAL_SEAL_MAGIC_SIZE) == 0;
  /* Trusted bytes load whether the tag checks or not: no key is needed. */
  if (sealed && (trusted || nxhal_seal_checks(bytes, size, &why))) {
    *out_payload = bytes + NXHAL_SEAL_HEADER_SIZE;
    *out_payload_size = size - NXHAL_SEAL_HEADER_SIZE;
    return NULL;
  }
  if (trusted) {
    *out_payload = data;
    *out_payload_size = size;
    return NULL;
  }
  if (!sealed) {
    status = nxhal_status_make(NXHAL_INVALID_ARGUMENT, NXHAL_REFUSING
                               "it carries no authenticator (not made by this user's "
                               "Executable::serialize, nxhal_executable_seal or Python's "
                               "Executable.serialize)" NXHAL_RUNS_NATIVE);
  } else if (why != NULL) {
    status = nxhal_status_make(NXHAL_INVALID_ARGUMENT,
                               NXHAL_REFUSING
                               "its authenticator cannot be checked: cannot use the key in "
                               "%s" NXHAL_RUNS_NATIVE,
                               why);
  } else {
    status = nxhal_status_make(NXHAL_INVALID_ARGUMENT, NXHAL_REFUSING
                               "its authenticator does not check: it was sealed by another "
                               "user's or machine's key, or changed since" NXHAL_RUNS_NATIVE);
  }
  free(why);
  return status;
}

NXHAL_SEAL_API void nxhal_loader_free(void* memory) {
  free(memory);
}
