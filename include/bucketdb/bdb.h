/* bucketdb public definitions shared by every module: version and status codes.
 *
 * Every function that can fail returns `int`: BDB_OK (0) or one of the negative
 * codes below. Codes live far below -1000 so they never collide with a negated
 * errno; when a system call fails, modules return BDB_ERR_IO and keep errno. */
#ifndef BUCKETDB_BDB_H
#define BUCKETDB_BDB_H

#define BDB_VERSION "0.1.0"

/* X-macro: name, value, message. One list so the enum and bdb_strerror agree. */
#define BDB_STATUS_LIST(X)                                                                         \
    X(BDB_OK, 0, "ok")                                                                             \
    X(BDB_ERR_NOMEM, -30001, "out of memory")                                                      \
    X(BDB_ERR_IO, -30002, "I/O error")                                                             \
    X(BDB_ERR_CORRUPT, -30003, "data is corrupt")                                                  \
    X(BDB_ERR_INVALID, -30004, "invalid argument")                                                 \
    X(BDB_ERR_NOTFOUND, -30005, "not found")                                                       \
    X(BDB_ERR_LIMIT, -30006, "limit exceeded")                                                     \
    X(BDB_ERR_READONLY, -30007, "storage is read-only after a failed fsync")                       \
    X(BDB_ERR_NOSPACE, -30008, "no space left on device")                                          \
    X(BDB_ERR_EXISTS, -30009, "already exists")                                                    \
    X(BDB_ERR_AGAIN, -30010, "temporarily unavailable, try again")                                 \
    X(BDB_ERR_SHUTDOWN, -30011, "shutting down")                                                   \
    X(BDB_ERR_PARTIAL, -30012, "partial answer: the storage backend could not be read")

enum bdb_status {
#define BDB_X_ENUM(name, value, msg) name = value,
    BDB_STATUS_LIST(BDB_X_ENUM)
#undef BDB_X_ENUM
};

/* Static message for a status code (never NULL). */
const char *bdb_strerror(int status);

#endif
