/* path: file names under a data directory.
 *
 * The engine builds every file name it opens from its data directory, a subdirectory
 * and a name read from the directory or made by the engine, so the length of the data
 * directory bounds them all: bdb_db_open refuses a directory longer than
 * BDB_DATA_DIR_MAX bytes (the server's `data` setting has the same limit), and then
 * "<dir>/<subdir>/<prefix><name>" with any subdirectory and prefix of the engine and
 * any name a directory can hold (NAME_MAX, 255 bytes) fits in BDB_PATH_BUF bytes.
 * That is what lets the scans that walk a directory format into a stack buffer. */
#ifndef BDB_PATH_H
#define BDB_PATH_H

#define BDB_DATA_DIR_MAX 1023
#define BDB_PATH_BUF 4096

/* "<dir>/<name><suffix>" in memory from bdb_malloc (release with free()); suffix may
 * be NULL. NULL when memory runs out, and also when dir is NULL, so that a chain of
 * joins started from a failed allocation fails once at its end (BDB_ERR_NOMEM). */
char *bdb_path_join(const char *dir, const char *name, const char *suffix);

#endif
