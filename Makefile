# spanprof: one build for both servers.
#
#   make          deps, then build/ngx_http_spanprof_module.so, build/mod_spanprof.so
#   make test     deps, unit tests, the same under ASan+UBSan, fuzzers, prove -r t/
#   make deps     install every Debian and npm package the build and tests need
#   make demo     nginx -> httpd -> backend here, traffic, the profiles it took
#   make deb      build, then Debian packages into build/deb/ (tools/mkdeb.sh)
#
# The paths under build/ named in README.md are a contract: tests, benchmarks
# and users' Dockerfiles rely on them.

BUILD       ?= build
B           := $(abspath $(BUILD))
NGINX_SRC   ?= /usr/share/nginx/src
APXS        ?= apxs
FUZZ_SECONDS ?= 10
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)

CC          ?= cc
CLANG       ?= clang
WARN        := -Wall -Wextra -Werror
CORE_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC $(WARN) \
               -fvisibility=hidden -Icore/include -Icore/src -I$(BUILD)/proto
# Libraries the core needs at link time; passed to both adapters' builds.
# Not libgcc_s: the sampler loads its unwinder with dlopen (sp_sampler.c).
CORE_LIBS   := -lm
# The exporter's own: never loaded into a server's workers.
EXPORT_LIBS := $(shell pkg-config --libs grpc libprotobuf-c zlib libdw 2>/dev/null) \
               -lelf -lpthread

SAN_FLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=all \
               -fno-omit-frame-pointer
TEST_LIBS   := -lcmocka $(CORE_LIBS)

CORE_SRCS   := $(sort $(wildcard core/src/*.c))
CORE_HDRS   := $(wildcard core/include/*.h core/src/*.h core/exporter/*.h)
CORE_OBJS   := $(CORE_SRCS:core/src/%.c=$(BUILD)/core/%.o)
CORE_LIB    := $(BUILD)/libspanprof_core.a

# protobuf-c code generated from proto/ at build time, never committed.
PROTO_FILES := $(sort $(shell find proto -name '*.proto' 2>/dev/null))
PROTO_C     := $(PROTO_FILES:proto/%.proto=$(BUILD)/proto/%.pb-c.c)
PROTO_H     := $(PROTO_C:.c=.h)
PROTO_OBJS  := $(PROTO_C:.c=.o)

# The exporter: core/exporter/ into its own archive, and its main.
EXPORTER_MAIN := core/exporter/spanprof_exporter.c
EXPORT_SRCS := $(filter-out $(EXPORTER_MAIN),$(sort $(wildcard core/exporter/*.c)))
EXPORT_OBJS := $(EXPORT_SRCS:core/exporter/%.c=$(BUILD)/exporter/%.o)
# C++ only where a library has no C interface (sp_absl.cc): no exceptions,
# no RTTI, so the C links need no C++ runtime. Sanitized builds take the
# same objects, uninstrumented.
EXPORT_CXX_SRCS := $(sort $(wildcard core/exporter/*.cc))
EXPORT_CXX_OBJS := $(EXPORT_CXX_SRCS:core/exporter/%.cc=$(BUILD)/exporter/%.o)
CORE_CXXFLAGS := -O2 -g -fPIC $(WARN) -fvisibility=hidden -fno-exceptions \
               -fno-rtti -Icore/exporter \
               $(shell pkg-config --cflags absl_synchronization 2>/dev/null)
EXPORT_LIB  := $(BUILD)/libspanprof_export.a
EXPORTER    := $(if $(wildcard $(EXPORTER_MAIN)),$(BUILD)/spanprof-exporter)
ALL_SRCS    := $(CORE_SRCS) $(EXPORT_SRCS) $(PROTO_C)

TEST_SRCS   := $(sort $(wildcard core/tests/test_*.c))
TEST_HDRS   := $(wildcard core/tests/*.h)
TEST_BINS   := $(TEST_SRCS:core/tests/%.c=$(BUILD)/tests/%)
ASAN_BINS   := $(TEST_SRCS:core/tests/%.c=$(BUILD)/tests-asan/%)

FUZZ_SRCS   := $(sort $(wildcard core/fuzz/fuzz_*.c))
FUZZ_BINS   := $(FUZZ_SRCS:core/fuzz/%.c=$(BUILD)/fuzz/%)

NGX_MODULE  := $(BUILD)/ngx_http_spanprof_module.so
HTTPD_MODULE := $(BUILD)/mod_spanprof.so

.PHONY: all deps build core modules test unit unit-asan fuzz prove clean bench-build unit-valgrind

# Generated sources stay after a build; make would otherwise delete them as
# intermediates and regenerate them under a concurrent build.
.SECONDARY: $(PROTO_C) $(PROTO_H)

all:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory build

deps:
	@tools/deps.sh

build: $(CORE_LIB) $(EXPORT_LIB) $(EXPORTER) $(NGX_MODULE) $(HTTPD_MODULE) \
       $(BUILD)/spanprof-dump

core: $(CORE_LIB)

# --- core: a position-independent static library linked into both modules

$(BUILD)/core/%.o: core/src/%.c $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -c $< -o $@

$(CORE_LIB): $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^

# --- the exporter's archive and executable

$(BUILD)/proto/%.pb-c.c $(BUILD)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/proto
	protoc-c --c_out=$(BUILD)/proto -Iproto $<

# Generated code gets the warnings it was written for, not ours.
$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c $(PROTO_H)
	$(CC) -std=c11 -O2 -g -fPIC -I$(BUILD)/proto -c $< -o $@

$(BUILD)/exporter/%.o: core/exporter/%.c $(CORE_HDRS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -Icore/exporter -c $< -o $@

$(BUILD)/exporter/%.o: core/exporter/%.cc $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CXX) $(CORE_CXXFLAGS) -c $< -o $@

$(EXPORT_LIB): $(EXPORT_OBJS) $(EXPORT_CXX_OBJS) $(PROTO_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/spanprof-exporter: $(EXPORTER_MAIN) $(EXPORT_LIB) $(CORE_LIB)
	$(CC) $(CORE_CFLAGS) -Icore/exporter $< $(EXPORT_LIB) $(CORE_LIB) \
	    $(EXPORT_LIBS) $(CORE_LIBS) -o $@

# spanprof-dump (tools/dump/): reads OTLP/JSON lines back into profiles.
$(BUILD)/spanprof-dump: tools/dump/spanprof_dump.c $(EXPORT_LIB) $(CORE_LIB)
	$(CC) $(CORE_CFLAGS) $< $(EXPORT_LIB) $(CORE_LIB) $(EXPORT_LIBS) \
	    $(CORE_LIBS) -o $@

# --- nginx: Debian's nginx-dev tree, --with-compat, our `config` script

NGX_CC_OPT := -O2 -Wall -Wextra -Werror -Wno-unused-parameter -I$(CURDIR)/core/include

$(BUILD)/nginx/Makefile: config Makefile
	@mkdir -p $(B)/nginx
	cd $(NGINX_SRC) && SPANPROF_CORE_LIB=$(abspath $(CORE_LIB)) \
	    SPANPROF_CORE_LIBS="$(CORE_LIBS)" \
	    ./configure --with-compat --add-dynamic-module=$(CURDIR) \
	    --builddir=$(B)/nginx --with-cc-opt="$(NGX_CC_OPT)" >$(B)/nginx/configure.log \
	    || { cat $(B)/nginx/configure.log; exit 1; }

# nginx's Makefile knows neither that the module links our archive nor that
# it includes core/include: remove its output and objects, so a changed core
# is always linked in and a changed header compiled in (an object built
# against an older sp_sampler_options read past its end).
$(NGX_MODULE): $(CORE_LIB) $(BUILD)/nginx/Makefile $(wildcard ngx_module/*.c ngx_module/*.h) $(CORE_HDRS)
	rm -f $(B)/nginx/ngx_http_spanprof_module.so $(B)/nginx/addon/ngx_module/*.o
	$(MAKE) --no-print-directory -f $(B)/nginx/Makefile -C $(NGINX_SRC) modules
	@# A new file, renamed over the old: nginx processes still running the
	@# old one (tests, a reload) would crash if it were rewritten in place.
	cp $(B)/nginx/ngx_http_spanprof_module.so $@.tmp
	mv -f $@.tmp $@

# --- httpd: apxs builds and links with libtool in its own directory

$(HTTPD_MODULE): $(CORE_LIB) $(wildcard httpd_module/*.c httpd_module/*.h) $(CORE_HDRS)
	@rm -rf $(B)/httpd && mkdir -p $(B)/httpd
	cp httpd_module/*.c $(B)/httpd/
	cd $(B)/httpd && $(APXS) -c -o mod_spanprof.la \
	    -Wc,-std=gnu11 -Wc,-Wall -Wc,-Wextra -Wc,-Werror -Wc,-Wno-unused-parameter \
	    -I$(CURDIR)/core/include mod_spanprof.c $(abspath $(CORE_LIB)) $(CORE_LIBS) \
	    >build.log 2>&1 || { cat build.log; exit 1; }
	cp $(B)/httpd/.libs/mod_spanprof.so $@.tmp && mv -f $@.tmp $@

# --- install: the layout of deploy/Dockerfile. Each module starts the
# spanprof-exporter it finds next to its own .so.

PREFIX       ?= /usr
NGX_MODDIR   ?= $(PREFIX)/lib/nginx/modules
HTTPD_MODDIR ?= $(PREFIX)/lib/apache2/modules

.PHONY: install
install: build
	install -d $(DESTDIR)$(NGX_MODDIR) $(DESTDIR)$(HTTPD_MODDIR)
	install -m 0644 $(NGX_MODULE) $(DESTDIR)$(NGX_MODDIR)/
	install -m 0755 $(BUILD)/spanprof-exporter $(DESTDIR)$(NGX_MODDIR)/
	install -m 0644 $(HTTPD_MODULE) $(DESTDIR)$(HTTPD_MODDIR)/
	install -m 0755 $(BUILD)/spanprof-exporter $(DESTDIR)$(HTTPD_MODDIR)/
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BUILD)/spanprof-dump $(DESTDIR)$(PREFIX)/bin/

# --- Debian packages: make install's layout, with dpkg-deb (tools/mkdeb.sh).
# The version is SP_VERSION, the one the exporter reports as
# telemetry.sdk.version, plus a Debian revision.
SP_VERSION   := $(shell sed -n 's/^\#define SP_VERSION "\(.*\)"/\1/p' core/include/sp_common.h)
DEB_REVISION ?= 1
DEB_VERSION  := $(SP_VERSION)-$(DEB_REVISION)

.PHONY: deb
deb: build
	rm -rf $(BUILD)/deb
	tools/mkdeb.sh $(BUILD) $(BUILD)/deb $(DEB_VERSION) $(NGINX_SRC)

# --- tests

# A shared object test_sampler loads and unloads while it is sampled.
TEST_DSO    := $(B)/tests/libsp_test_dso.so
TEST_DEFS   := -DSP_TEST_DSO='"$(TEST_DSO)"'

$(TEST_DSO): core/tests/dso/sp_test_dso.c
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -shared $< -o $@

$(BUILD)/tests/test_sampler $(BUILD)/tests-asan/test_sampler: $(TEST_DSO)

$(BUILD)/tests/%: core/tests/%.c $(EXPORT_LIB) $(CORE_LIB) $(TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) $(TEST_DEFS) -Icore/exporter -Icore/tests $< \
	    $(EXPORT_LIB) $(CORE_LIB) $(EXPORT_LIBS) $(TEST_LIBS) -o $@

# The sanitized tests and the fuzzers use every source compiled again with
# the sanitizers on (generated protobuf-c code included), once per flavour,
# into an archive of its own.
ASAN_OBJS   := $(ALL_SRCS:%.c=$(BUILD)/asan/%.o)
ASAN_LIB    := $(BUILD)/libspanprof_asan.a
FUZZO_OBJS  := $(ALL_SRCS:%.c=$(BUILD)/fuzzobj/%.o)
FUZZO_LIB   := $(BUILD)/libspanprof_fuzz.a
SAN_CFLAGS  := $(filter-out -O2,$(CORE_CFLAGS)) -Wno-error -O1 -Icore/exporter

$(BUILD)/asan/%.o: %.c $(CORE_HDRS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(SAN_CFLAGS) $(SAN_FLAGS) -c $< -o $@

$(BUILD)/fuzzobj/%.o: %.c $(CORE_HDRS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CLANG) $(SAN_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined \
	    -fno-sanitize-recover=all -c $< -o $@

$(ASAN_LIB): $(ASAN_OBJS) $(EXPORT_CXX_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZO_LIB): $(FUZZO_OBJS) $(EXPORT_CXX_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests-asan/%: core/tests/%.c $(ASAN_LIB) $(CORE_HDRS) $(TEST_HDRS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(SAN_CFLAGS) $(SAN_FLAGS) $(TEST_DEFS) -Icore/tests \
	    $< $(ASAN_LIB) $(EXPORT_LIBS) $(TEST_LIBS) -o $@

$(BUILD)/fuzz/%: core/fuzz/%.c $(FUZZO_LIB) $(CORE_HDRS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CLANG) $(SAN_CFLAGS) -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all $< $(FUZZO_LIB) $(EXPORT_LIBS) $(CORE_LIBS) \
	    -o $@

# --- benchmarks (run by hand: bench/README.md)

BENCH_SRCS  := $(sort $(wildcard bench/*_bench.c))
BENCH_BINS  := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

$(BUILD)/bench/sampler_bench: bench/sampler_bench.c $(CORE_LIB) $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) $< $(CORE_LIB) $(CORE_LIBS) -lpthread -o $@

$(BUILD)/bench/ring_bench: bench/ring_bench.c $(CORE_LIB) $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) $< $(CORE_LIB) $(CORE_LIBS) -o $@

$(BUILD)/bench/entry_bench: bench/entry_bench.c $(CORE_LIB) $(CORE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) $< $(CORE_LIB) $(CORE_LIBS) -o $@

bench-build: $(BENCH_BINS)

unit: $(TEST_BINS)
	@tools/run-unit.sh "unit" $(TEST_BINS)

unit-asan: $(ASAN_BINS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    tools/run-unit.sh "unit (ASan+UBSan)" $(ASAN_BINS)

# The sampler under valgrind too (signals, timers, libgcc's unwinder); the
# suppression covers sp_in_unwinder's reads of the top of a sampled
# thread's stack, unused words too. valgrind runs one thread at a time;
# its default lock let a thread that spins starve the blocked ones (CI
# once saw one call each in two seconds): a fair one.
# test_crc32c too: the callgrind benchmarks mean something only if valgrind
# computes the crc32 instruction as the CPU does.
unit-valgrind: $(BUILD)/tests/test_sampler $(BUILD)/tests/test_crc32c
	valgrind --error-exitcode=9 -q --fair-sched=yes \
	    --suppressions=core/tests/valgrind.supp \
	    $(BUILD)/tests/test_sampler >$(BUILD)/valgrind-sampler.log 2>&1 \
	    || { cat $(BUILD)/valgrind-sampler.log; exit 1; }
	valgrind --error-exitcode=9 -q $(BUILD)/tests/test_crc32c \
	    >$(BUILD)/valgrind-crc32c.log 2>&1 \
	    || { cat $(BUILD)/valgrind-crc32c.log; exit 1; }
	@echo "unit (valgrind): test_sampler, test_crc32c clean"

fuzz: $(FUZZ_BINS)
	@tools/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

prove: build
	prove -r t/

test:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory build
	@$(MAKE) --no-print-directory -j$(JOBS) $(TEST_BINS) $(ASAN_BINS) $(FUZZ_BINS)
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory unit-asan
	@$(MAKE) --no-print-directory unit-valgrind
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory prove
	@echo "make test: all passed"

# The reference deployment on this machine, traffic, and its profiles
# (tools/demo.sh; it runs deps and build itself).
.PHONY: demo
demo:
	@tools/demo.sh

clean:
	rm -rf $(BUILD)
