# bucketdb build. `make` builds build/bucketdb; `make MODE=asan` builds the
# sanitizer variant into build-asan/. `make unit` builds every unit test.
# Sources are found by globbing so that adding a module needs no edit here.
CC      ?= cc
MODE    ?= release
ifeq ($(MODE),asan)
BUILD   ?= build-asan
OPT      = -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDOPT    = -fsanitize=address,undefined
else ifeq ($(MODE),tsan)
# ThreadSanitizer (docs/TESTING.md#threadsanitizer); run with TSAN_OPTIONS from there
BUILD   ?= build-tsan
OPT      = -O1 -fsanitize=thread -fno-omit-frame-pointer
LDOPT    = -fsanitize=thread
else ifeq ($(MODE),coverage)
# gcov instrumentation for `make coverage` (branch counts need -O0 to map to the source)
BUILD   ?= build-cov
OPT      = -O0 --coverage
LDOPT    = --coverage
else
BUILD   ?= build
OPT      = -O2
LDOPT    =
endif

PKGS     = libmicrohttpd jansson zlib libzstd libssl libcrypto
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers \
           -g -pthread -Iinclude -Isrc -Itests/unit $(OPT) $(shell pkg-config --cflags $(PKGS))
LDLIBS  += $(shell pkg-config --libs $(PKGS)) -lxxhash -lpthread -lm
LDFLAGS += $(LDOPT) -pthread

LIB_SRCS  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRCS  := $(shell find src/cli -name '*.c' | sort)
UNIT_SRCS := $(shell find tests/unit -name '*_test.c' | sort)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/%.o)
UNIT_BINS := $(UNIT_SRCS:%.c=$(BUILD)/%)
LIBA      := $(BUILD)/libbucketdb.a

.PHONY: all unit clean format format-check
all: $(BUILD)/bucketdb

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIBA): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bucketdb: $(CLI_OBJS) $(LIBA)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(LIBA) $(LDLIBS)

$(BUILD)/tests/unit/%_test: $(BUILD)/tests/unit/%_test.o $(LIBA)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBA) $(LDLIBS) -lcmocka

# This test stands in for the system calls under vfs_posix.c (EINTR, short transfers,
# errors) through the linker's symbol wrapping; see the test's header comment.
VFS_WRAPPED := open close pread pwrite fdatasync fstat ftruncate mmap munmap fsync readdir
$(BUILD)/tests/unit/storage/vfs/vfs_posix_wrap_test: private LDFLAGS += \
    $(foreach s,$(VFS_WRAPPED),-Wl,--wrap=$(s))

unit: $(UNIT_BINS)

format:
	clang-format -i $$(find src include tests bench -name '*.[ch]')

format-check:
	clang-format --dry-run --Werror $$(find src include tests bench -name '*.[ch]')

# Dashboard (src/server/http/h_ui.c, docs/DASHBOARD.md): the files of web/ compiled into
# the library as $(BUILD)/gen/ui_assets.c by web/embed.sh (od and sed only).
UI_ASSETS := $(sort $(wildcard web/*.html web/*.css web/*.js))
UI_OBJ    := $(BUILD)/gen/ui_assets.o
$(LIBA): $(UI_OBJ)
$(BUILD)/gen/ui_assets.c: $(UI_ASSETS) web/embed.sh
	@mkdir -p $(dir $@)
	sh web/embed.sh $(UI_ASSETS) >$@.tmp && mv $@.tmp $@
$(UI_OBJ): $(BUILD)/gen/ui_assets.c
	$(CC) $(CFLAGS) -c $< -o $@

# Install for operators (docs/OPERATIONS.md#installing): binary, man pages, an example
# configuration generated from this build's settings table, a systemd unit.
# `make install PREFIX=/usr DESTDIR=/tmp/pkg` stages a package tree. An existing
# $(SYSCONFDIR)/bucketdb/bucketdb.conf is never overwritten.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/bucketdb
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(PREFIX)/lib/systemd/system
.PHONY: install example-config
example-config: $(BUILD)/bucketdb # regenerated every time: it is two runs of the binary
	sh packaging/gen-config.sh $(BUILD)/bucketdb >$(BUILD)/bucketdb.conf.example
install: $(BUILD)/bucketdb
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR) \
	    $(DESTDIR)$(SYSCONFDIR)/bucketdb $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BUILD)/bucketdb $(DESTDIR)$(BINDIR)/bucketdb
	install -m 0644 man/*.1 $(DESTDIR)$(MANDIR)/man1/
	sh packaging/gen-config.sh $(BUILD)/bucketdb >$(DESTDIR)$(DOCDIR)/bucketdb.conf.example
	chmod 0644 $(DESTDIR)$(DOCDIR)/bucketdb.conf.example
	test -e $(DESTDIR)$(SYSCONFDIR)/bucketdb/bucketdb.conf || \
	    install -m 0644 $(DESTDIR)$(DOCDIR)/bucketdb.conf.example $(DESTDIR)$(SYSCONFDIR)/bucketdb/bucketdb.conf
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    packaging/bucketdb.service.in >$(DESTDIR)$(UNITDIR)/bucketdb.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/bucketdb.service

# Branch coverage of the storage engine and the parsers (docs/TESTING.md#coverage):
# builds MODE=coverage, runs the unit tests of those modules (tests/unit mirrors src/)
# and prints gcovr's per-file table and one figure per module.
COV_DIRS = src/storage/embedded src/storage/vfs src/ingest
COV_BUILD ?= build-cov
.PHONY: coverage
coverage:
	$(MAKE) MODE=coverage BUILD=$(COV_BUILD) all unit
	sh tests/coverage.sh $(COV_BUILD) $(COV_DIRS)

clean:
	rm -rf build build-asan build-fuzz build-tsan build-cov

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
