# spanprof: one build for both servers.
#
#   make          deps, then build/ngx_http_spanprof_module.so, build/mod_spanprof.so
#   make test     deps, unit tests, the same under ASan+UBSan, fuzzers, prove -r t/
#   make deps     install every Debian and npm package the build and tests need
#
# The paths under build/ named in README.md are a contract: tests, benchmarks
# and users' Dockerfiles rely on them.

BUILD       ?= build
B           := $(abspath $(BUILD))
NGINX_SRC   ?= /usr/share/nginx/src
APXS        ?= apxs
FUZZ_SECONDS ?= 10

CC          ?= cc
CLANG       ?= clang
WARN        := -Wall -Wextra -Werror
CORE_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC $(WARN) \
               -fvisibility=hidden -Icore/include -Icore/src
# Libraries the core needs at link time; passed to both adapters' builds.
CORE_LIBS   := -lm

SAN_FLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=all \
               -fno-omit-frame-pointer
TEST_LIBS   := -lcmocka $(CORE_LIBS)

CORE_SRCS   := $(sort $(wildcard core/src/*.c))
CORE_HDRS   := $(wildcard core/include/*.h core/src/*.h)
CORE_OBJS   := $(CORE_SRCS:core/src/%.c=$(BUILD)/core/%.o)
CORE_LIB    := $(BUILD)/libspanprof_core.a

TEST_SRCS   := $(sort $(wildcard core/tests/test_*.c))
TEST_HDRS   := $(wildcard core/tests/*.h)
TEST_BINS   := $(TEST_SRCS:core/tests/%.c=$(BUILD)/tests/%)
ASAN_BINS   := $(TEST_SRCS:core/tests/%.c=$(BUILD)/tests-asan/%)

FUZZ_SRCS   := $(sort $(wildcard core/fuzz/fuzz_*.c))
FUZZ_BINS   := $(FUZZ_SRCS:core/fuzz/%.c=$(BUILD)/fuzz/%)

NGX_MODULE  := $(BUILD)/ngx_http_spanprof_module.so
HTTPD_MODULE := $(BUILD)/mod_spanprof.so

.PHONY: all deps build core modules test unit unit-asan fuzz prove clean

all:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory build

deps:
	@tools/deps.sh

build: $(CORE_LIB) $(NGX_MODULE) $(HTTPD_MODULE)

core: $(CORE_LIB)

# --- core: a position-independent static library linked into both modules

$(BUILD)/core/%.o: core/src/%.c $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -c $< -o $@

$(CORE_LIB): $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^

# --- nginx: Debian's nginx-dev tree, --with-compat, our `config` script

NGX_CC_OPT := -Wall -Wextra -Werror -Wno-unused-parameter -I$(CURDIR)/core/include

$(BUILD)/nginx/Makefile: config
	@mkdir -p $(B)/nginx
	cd $(NGINX_SRC) && SPANPROF_CORE_LIB=$(abspath $(CORE_LIB)) \
	    SPANPROF_CORE_LIBS="$(CORE_LIBS)" \
	    ./configure --with-compat --add-dynamic-module=$(CURDIR) \
	    --builddir=$(B)/nginx --with-cc-opt="$(NGX_CC_OPT)" >$(B)/nginx/configure.log \
	    || { cat $(B)/nginx/configure.log; exit 1; }

# nginx's Makefile does not know the module links our archive: remove its
# output so a changed core is always linked in.
$(NGX_MODULE): $(CORE_LIB) $(BUILD)/nginx/Makefile $(wildcard ngx_module/*.c ngx_module/*.h) $(CORE_HDRS)
	rm -f $(B)/nginx/ngx_http_spanprof_module.so
	$(MAKE) --no-print-directory -f $(B)/nginx/Makefile -C $(NGINX_SRC) modules
	cp $(B)/nginx/ngx_http_spanprof_module.so $@

# --- httpd: apxs builds and links with libtool in its own directory

$(HTTPD_MODULE): $(CORE_LIB) $(wildcard httpd_module/*.c httpd_module/*.h) $(CORE_HDRS)
	@rm -rf $(B)/httpd && mkdir -p $(B)/httpd
	cp httpd_module/*.c $(B)/httpd/
	cd $(B)/httpd && $(APXS) -c -o mod_spanprof.la \
	    -Wc,-std=gnu11 -Wc,-Wall -Wc,-Wextra -Wc,-Werror -Wc,-Wno-unused-parameter \
	    -I$(CURDIR)/core/include mod_spanprof.c $(abspath $(CORE_LIB)) $(CORE_LIBS) \
	    >build.log 2>&1 || { cat build.log; exit 1; }
	cp $(B)/httpd/.libs/mod_spanprof.so $@

# --- tests

$(BUILD)/tests/%: core/tests/%.c $(CORE_LIB) $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -Icore/tests $< $(CORE_LIB) $(TEST_LIBS) -o $@

# The sanitized tests compile the core's sources again with the sanitizers on.
$(BUILD)/tests-asan/%: core/tests/%.c $(CORE_SRCS) $(CORE_HDRS) $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -O1 $(SAN_FLAGS) -Icore/tests $< $(CORE_SRCS) $(TEST_LIBS) -o $@

$(BUILD)/fuzz/%: core/fuzz/%.c $(CORE_SRCS) $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CLANG) $(filter-out -O2,$(CORE_CFLAGS)) -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all $< $(CORE_SRCS) $(CORE_LIBS) -o $@

unit: $(TEST_BINS)
	@tools/run-unit.sh "unit" $(TEST_BINS)

unit-asan: $(ASAN_BINS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    tools/run-unit.sh "unit (ASan+UBSan)" $(ASAN_BINS)

fuzz: $(FUZZ_BINS)
	@tools/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

prove: build
	prove -r t/

test:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory build
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory unit-asan
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory prove
	@echo "make test: all passed"

clean:
	rm -rf $(BUILD)
