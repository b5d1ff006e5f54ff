# bucketdb build. `make` builds build/bucketdb; `make MODE=asan` builds the
# sanitizer variant into build-asan/. `make unit` builds every unit test.
# Sources are found by globbing so that adding a module needs no edit here.
CC      ?= cc
MODE    ?= release
ifeq ($(MODE),asan)
BUILD   ?= build-asan
OPT      = -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDOPT    = -fsanitize=address,undefined
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

unit: $(UNIT_BINS)

format:
	clang-format -i $$(find src include tests bench -name '*.[ch]')

format-check:
	clang-format --dry-run --Werror $$(find src include tests bench -name '*.[ch]')

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
