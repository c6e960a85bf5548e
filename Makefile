# Makefile: builds libpcg, the programs and the tests of pcg-tts.
#   make            library and programs (bin/). The first build installs the
#                   Debian packages it needs (scripts/install-deps, with sudo when
#                   not root) and leaves build/.deps-ok; `make deps` runs that
#                   install again, also when the stamp is there
#   make bench      the benches that need no weights (bench/run), briefly
#   make test       builds everything, runs tests/run (offline, a few minutes; the
#                   first time it pip-installs gguf and openai into build/pyenv)
#   make test T=NAME  only the tests whose names contain NAME (T="gguf http": either)
#   make test-gpu   the CUDA tests on a GPU, also under compute-sanitizer
#   make test-arm   the engine (lib/core, lib/formats, lib/engine) and its kernel
#                   and forward-pass tests cross-built for ARM64 into build/arm64/
#                   and run under qemu-aarch64 (scripts/test-arm): on a CPU with
#                   the dot-product and int8 matrix extensions and on one without,
#                   each kernel family pinned; the first time it installs the
#                   cross compiler, qemu and the arm64 libraries (install-deps --arm64)
#   make gpu-check  the first thing to run where a GPU is at hand (scripts/gpu-check):
#                   the CUDA tests, LLaSA-1B's decode, the pipeline, the codec and
#                   asg-build on the GPU, every step time-limited, a report for
#                   docs/BENCHMARKS.md in build/gpu-check.md ($OUT/ when OUT is set)
#   make gpu-pack   build/gpu-pack.tar.xz (about 11 MB): the programs and CUDA tests
#                   gpu-check runs, with the Debian libraries they need, for a GPU
#                   machine without the build (scripts/gpu-window runs it there)
#   make gpu-rehearse  the GPU window tried here (scripts/gpu-rehearse): fails if
#                   what travels, the budget or what comes back would not fit
#   make demo       runs the demo job on the embedded tiny model
#   make install    PREFIX=/usr/local (bin/, share/man/, the demo voice in
#                   share/pcg-tts/, the CUDA backend in lib/pcg-tts/, systemd
#                   units in SYSTEMDUNITDIR, default PREFIX/lib/systemd/system,
#                   their user in SYSUSERSDIR, default PREFIX/lib/sysusers.d, and
#                   example unit settings in share/pcg-tts/systemd/); DESTDIR
#                   stages it for a package
#   make eval-deps  pip-installs what pcg-eval's WER needs (tools/eval/requirements.txt)
#   make test-deps  makes build/pyenv again: gguf-py and numpy, for the tests that
#                   check our GGUF files with llama.cpp's own reader, and openai, the
#                   official client tests/http.sh runs against pcg-httpd (without
#                   them those checks skip loudly)
#   make clean
# CUDA sources (lib/cuda/*.cu) build when nvcc is found; CUDA=0 turns that off.
# They make build/libpcg-cuda.so, which the programs do not link: libpcg opens
# it on the first use of a CUDA device (lib/cuda/library.h).

PREFIX   ?= /usr/local
# Where systemd looks for packaged units and sysusers.d entries under PREFIX
# (/usr/local/lib/systemd/system is in its search path, as /usr/lib/... is).
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR    ?= $(PREFIX)/lib/sysusers.d
CC       ?= cc
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
PKGS     := openblas jansson libpcre2-8 libzmq libsodium msgpack sndfile samplerate fftw3f fftw3
# espeak-ng's header only: lib/text/voice.c opens libespeak-ng.so.1 on the
# first phoneme voice spoken (its audio output pulls in 25 libraries).
# pkg-config is called lazily: on a fresh machine it exists only after install-deps.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) espeak-ng 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lopenblas -ljansson -lpcre2-8 -lsodium -lsndfile -lsamplerate -lfftw3f -lfftw3)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -pthread -MMD -MP $(LIB_INC) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS_ALL = $(CUDA_RPATH) $(PKG_LIBS) -ldl -lm

NVCC     ?= $(shell command -v nvcc 2>/dev/null)
CUDA     ?= $(if $(NVCC),1,0)
CUDA_SRC := $(if $(filter 1,$(CUDA)),$(wildcard lib/cuda/*.cu))
CUDA_OBJ := $(CUDA_SRC:%.cu=build/%.o)
CUDA_LIB := $(if $(CUDA_OBJ),build/libpcg-cuda.so)
# The CUDA tests link the CUDA objects themselves, all but the library's entry
# point (library.cu), and call libpcg directly.
CUDA_TEST_OBJ := $(filter-out build/lib/cuda/library.o,$(CUDA_OBJ))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# Ampere (A100) and Hopper (H100, H200) machine code, and PTX for later GPUs.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?= -O2 -g -lineinfo
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcublas -lcufft -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ -lm
CUDA_TESTS := $(if $(CUDA_OBJ),$(patsubst tests/cuda/%.c,build/tests/cuda-%,$(wildcard tests/cuda/*.c)))
# With CUDA, libpcg opens libpcg-cuda.so (lib/engine/cudaload.c), which dlopen finds
# through the program's RUNPATH ($$ORIGIN is the program's directory): where
# make install puts it, PREFIX/lib/pcg-tts beside PREFIX/bin, then this tree's
# build/ beside bin/ (for build/tests/*, build/ itself).
ifneq ($(CUDA_OBJ),)
ALL_CFLAGS += -DPCG_CUDA=1
CUDA_RPATH = -Wl,-rpath,'$$ORIGIN/../lib/pcg-tts:$$ORIGIN/../build'
build/tests/%: CUDA_RPATH = -Wl,-rpath,'$$ORIGIN/..'
endif

# lib/ in folders, each a layer on those before it (tests/layers.sh checks the
# includes); programs include a header by its name alone.
LIB_DIRS := core formats engine wire text speculate codec serve
LIB_INC  := -Ilib $(addprefix -Ilib/,$(LIB_DIRS))
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard lib/$(d)/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=build/%.o)
ASAN_OBJ := $(LIB_SRC:%.c=build/asan/%.o)
PROGS    := $(patsubst %/main.c,%,$(wildcard */main.c))
BINS     := $(PROGS:%=bin/%)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTS    := $(TEST_SRC:tests/unit/%.c=build/tests/%)
# Tests of parsers of untrusted input also run under AddressSanitizer and UBSan.
ASAN_TESTS := $(patsubst tests/unit/%.c,build/tests/asan-%,$(wildcard tests/unit/test_safetensors*.c tests/unit/test_config*.c tests/unit/test_tokenizer*.c tests/unit/test_proto*.c tests/unit/test_codes*.c tests/unit/test_asg*.c tests/unit/test_tm*.c tests/unit/test_kmeans*.c tests/unit/test_mtp.c tests/unit/test_mcd*.c tests/unit/test_gguf*.c tests/unit/test_fileio.c))
BENCH_SRC := $(wildcard bench/*.c)
BENCHES  := $(BENCH_SRC:bench/%.c=bin/bench-%)
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

DEPS_OK  := build/.deps-ok

.PHONY: all test test-gpu demo voice install clean bench deps eval-deps test-deps
# Keep the objects of tests and benches: they are intermediates of pattern rules.
.SECONDARY:
all: $(BINS) $(BENCHES) $(CUDA_LIB)

# Installs the Debian packages the build needs when one is missing.
$(DEPS_OK): scripts/install-deps
	@scripts/install-deps
	@mkdir -p build && touch $@
.PHONY: deps
deps:
	@scripts/install-deps
	@mkdir -p build && touch $(DEPS_OK)

build/libpcg.a: $(LIB_OBJ)
	ar rcs $@ $^
build/libpcg-asan.a: $(ASAN_OBJ)
	ar rcs $@ $^

build/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<
build/asan/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SANITIZE) -c -o $@ $<
# ASan's own advice: -O1 (the ASan library builds in half the time of -O2, and
# its tests run no slower for it here).
build/asan/%.o: OPT := -O1

# The matmul kernels rely on a * b + c becoming one FMA (-std=c11 turns that off).
build/lib/engine/matmul.o build/asan/lib/engine/matmul.o: ALL_CFLAGS += -ffp-contract=fast
# X-codec2's anti-aliased SnakeBeta: sinf vectorised through libmvec (the file says why
# -ffast-math is safe there).
build/lib/codec/xc2enc_act.o build/asan/lib/codec/xc2enc_act.o: ALL_CFLAGS += -ffast-math

define prog_rule
bin/$(1): $(patsubst %.c,build/%.o,$(wildcard $(1)/*.c)) build/libpcg.a
	@mkdir -p bin
	$$(CC) $$(ALL_CFLAGS) -o $$@ $$^ $$(LDLIBS_ALL)
endef
$(foreach p,$(PROGS),$(eval $(call prog_rule,$(p))))

# pcg-httpd alone links libsamplerate and librubberband (its HTTP is its own, http.c).
HTTPD_PKGS := samplerate rubberband
bin/pcg-httpd: LDLIBS_ALL += $(shell pkg-config --libs $(HTTPD_PKGS) 2>/dev/null || echo -lsamplerate -lrubberband)

bin/bench-%: build/bench/%.o build/libpcg.a
	@mkdir -p bin
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS_ALL)

build/tests/%: build/tests/unit/%.o build/libpcg.a
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS_ALL)
build/tests/asan-%: build/asan/tests/unit/%.o build/libpcg-asan.a
	$(CC) $(ALL_CFLAGS) $(SANITIZE) -o $@ $^ $(LDLIBS_ALL)

# CUDA: lib/cuda/*.cu into libpcg-cuda.so when nvcc is present (CUDA=0: off).
# Position-independent, every name hidden but the entry point (library.cu);
# -z defs: a call into libpcg missing from lib/cuda/library.h's table fails here.
build/libpcg-cuda.so: $(CUDA_OBJ)
	$(CC) -shared -Wl,-z,defs -o $@ $^ $(CUDA_LIBS)
build/lib/cuda/%.o: lib/cuda/%.cu | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(CUDA_ARCH) -std=c++17 -DPCG_CUDA=1 $(LIB_INC) \
		-Xcompiler -Wall,-Wextra,-fPIC,-fvisibility=hidden -MMD -MP -c -o $@ $<
build/tests/cuda-%: build/tests/cuda/%.o $(CUDA_TEST_OBJ) build/libpcg.a
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS_ALL) $(CUDA_LIBS)
# The GPU tests may call the CUDA runtime (cudaMemcpy) through cuda/check.h.
build/tests/cuda/%.o: ALL_CFLAGS += -isystem $(CUDA_HOME)/include

# libFuzzer targets (tests/fuzz/*.c) when clang can build them.
CLANG    ?= $(shell command -v clang 2>/dev/null)
FUZZ_OK  := $(if $(CLANG),$(shell printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
		$(CLANG) -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null && echo 1))
FUZZERS  := $(if $(FUZZ_OK),$(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/*.c)))
build/fuzz/fuzz_proto: tests/fuzz/fuzz_proto.c lib/wire/proto.c lib/wire/synth.c lib/core/chunks.c lib/core/err.c lib/core/dtype.c lib/core/quant.c lib/core/sampling.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -lmsgpackc -lm -o $@
build/fuzz/fuzz_gguf: tests/fuzz/fuzz_gguf.c lib/formats/gguf.c lib/formats/config_gguf.c lib/text/tokenizer_gguf.c lib/text/tokenizer.c lib/text/tokenizer_load.c lib/core/fileio.c lib/core/err.c lib/core/dtype.c lib/core/quant.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -ljansson -lpcre2-8 -lm -o $@
build/fuzz/fuzz_asg: tests/fuzz/fuzz_asg.c lib/formats/asg.c lib/core/image.c lib/speculate/policy.c $(wildcard lib/speculate/policy_*.c) lib/core/fileio.c lib/core/err.c lib/core/rng.c lib/core/sampling.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -lm -o $@
# fuzz_http: pcg-httpd's parser (http.c, with its fuzz entry) alone
build/fuzz/fuzz_http: tests/fuzz/fuzz_http.c pcg-httpd/http.c lib/core/err.c lib/core/clock.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -DPCG_HTTP_FUZZ -pthread -fsanitize=fuzzer,address,undefined $(LIB_INC) -Ipcg-httpd $^ -lm -o $@
build/fuzz/fuzz_tm: tests/fuzz/fuzz_tm.c lib/formats/tm.c lib/core/image.c lib/core/fileio.c lib/core/err.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -lm -o $@
build/fuzz/fuzz_text: tests/fuzz/fuzz_text.c lib/formats/config.c lib/text/tokenizer.c lib/text/tokenizer_load.c lib/text/codes.c lib/text/voice.c lib/core/fileio.c lib/core/err.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -ljansson -lpcre2-8 -lm -o $@
build/fuzz/fuzz_safetensors: tests/fuzz/fuzz_safetensors.c lib/formats/safetensors.c lib/core/fileio.c lib/core/err.c lib/core/dtype.c lib/core/quant.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -ljansson -lm -o $@
# fuzz_mtp brings its own stand-ins for the model and pcg_matmul (see the file).
build/fuzz/fuzz_mtp: tests/fuzz/fuzz_mtp.c lib/engine/mtp.c lib/engine/weights.c lib/formats/safetensors.c lib/core/fileio.c lib/core/err.c lib/core/dtype.c lib/core/quant.c | $(DEPS_OK)
	@mkdir -p build/fuzz
	$(CLANG) -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(LIB_INC) $^ -ljansson -lm -o $@

# The light PyPI packages the tests check against: gguf-py (llama.cpp's own
# GGUF reader, and numpy) for tests/gguf.sh, tests/quant.sh and
# tests/quantize.sh, openai (OpenAI's Python client) for tests/http.sh. Made
# once into a virtual environment of the build (it sees the packages of the
# python3 it comes from); tests/run puts it first on PATH. Without a network
# it is not made, make test goes on, and those checks skip saying so.
PYENV_PKGS := 'gguf>=0.17' numpy openai
PYENV_OK   := build/pyenv/.ok
$(PYENV_OK):
	@rm -rf build/pyenv && mkdir -p build
	@echo "build/pyenv: pip install $(PYENV_PKGS)"
	@if $(PYTHON) -m venv --system-site-packages build/pyenv >build/pyenv.log 2>&1 && \
	    build/pyenv/bin/python3 -m pip install -q --disable-pip-version-check --retries 1 \
		--timeout 20 $(PYENV_PKGS) >>build/pyenv.log 2>&1; then touch $@; \
	else rm -rf build/pyenv; echo "build/pyenv: not made (build/pyenv.log says why); the checks against gguf-py and openai skip"; fi

# make test builds with a job per CPU unless given -j, then runs the tests
# (those named by T when it is given: T="gguf http").
test:
	@case " $$MAKEFLAGS" in *" -j"*|*jobserver*) j= ;; *) j=-j$$(nproc 2>/dev/null || echo 2) ;; esac; \
		$(MAKE) --no-print-directory $$j test-build
	@tests/run $(T)
.PHONY: test-build
test-build: all $(TESTS) $(ASAN_TESTS) $(CUDA_TESTS) $(FUZZERS) $(PYENV_OK)

# ARM64: the layers the engine stands on, cross-built into build/arm64/ (no
# x86 object there), and the tests of the kernels and of the forward pass,
# run under qemu-user by scripts/test-arm. The other layers link libraries
# (ZeroMQ, libsndfile, ...) the engine does not need and are not built.
ARM_CC    ?= aarch64-linux-gnu-gcc
ARM_AR    ?= aarch64-linux-gnu-ar
ARM_DIRS  := core formats engine
ARM_SRC   := $(foreach d,$(ARM_DIRS),$(wildcard lib/$(d)/*.c))
ARM_OBJ   := $(ARM_SRC:%.c=build/arm64/%.o)
ARM_TESTS := $(addprefix build/arm64/tests/,test_matmul test_attention test_qmatmul test_llama_parity \
		test_forward_batch test_gguf_model test_mtp test_llasa_plus)
ARM_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -pthread -MMD -MP -Ilib \
		$(addprefix -Ilib/,$(ARM_DIRS)) $(CFLAGS)
ARM_DEPS_OK := build/arm64/.deps-ok

# test_llasa_plus makes its GGUF fixtures with bin/pcg-quantize, built for
# this machine (files are the same on either architecture).
.PHONY: test-arm
test-arm: $(ARM_TESTS) bin/pcg-quantize
	@scripts/test-arm $(ARM_TESTS)
$(ARM_DEPS_OK): scripts/install-deps
	@scripts/install-deps --arm64
	@mkdir -p build/arm64 && touch $@
build/arm64/%.o: %.c | $(ARM_DEPS_OK)
	@mkdir -p $(dir $@)
	$(ARM_CC) $(ARM_CFLAGS) -c -o $@ $<
build/arm64/lib/engine/matmul.o: ARM_CFLAGS += -ffp-contract=fast
build/arm64/libpcg.a: $(ARM_OBJ)
	$(ARM_AR) rcs $@ $^
build/arm64/tests/%: build/arm64/tests/unit/%.o build/arm64/libpcg.a
	$(ARM_CC) $(ARM_CFLAGS) -o $@ $^ -lopenblas -ljansson -ldl -lm

# On a machine with a GPU: every CUDA test against the CPU backend, and under
# compute-sanitizer (tests/gpu).
test-gpu: all $(CUDA_TESTS)
	@tests/gpu

# The figures that need a GPU, each step under its own time limit (the
# script says which; without a GPU it writes a report of nothing measured).
.PHONY: gpu-check gpu-pack gpu-rehearse
gpu-check: all $(CUDA_TESTS)
	@scripts/gpu-check

# What scripts/gpu-check runs, for a GPU machine that has CUDA but neither the
# build nor the Debian libraries: one file, build/gpu-pack.tar.xz, to carry
# (scripts/gpu-pack); scripts/gpu-window unpacks and runs it there.
gpu-pack: all $(CUDA_TESTS)
	@[ -n "$(CUDA_TESTS)" ] || { echo "gpu-pack: no CUDA build (nvcc not found, or CUDA=0)" >&2; exit 1; }
	@scripts/gpu-pack

# The GPU window tried here: what travels, the budget, what comes back.
gpu-rehearse: gpu-pack
	@scripts/gpu-rehearse

demo: all
	@scripts/demo

# The demo voice from scratch (about 80 minutes on 2 cores): tools/voice/.
voice: all
	@tools/voice/make-voice

bench: all
	@bench/run

# Whisper for scripts/pcg-eval, into the python3 on PATH (not needed by make test).
PYTHON ?= python3
eval-deps:
	$(PYTHON) -m pip install --break-system-packages -r tools/eval/requirements.txt

# build/pyenv again (make test makes it once), e.g. after a try without network.
test-deps:
	@rm -f $(PYENV_OK) && $(MAKE) --no-print-directory $(PYENV_OK)
	@[ -f $(PYENV_OK) ]

# torch, transformers and safetensors for tools/draft/distill_draft.py (a draft
# distilled from a target) and tests/draft.sh; make test runs without them.
.PHONY: draft-deps
draft-deps:
	$(PYTHON) -m pip install --break-system-packages torch transformers safetensors

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin
	install -m 755 scripts/pcg-up scripts/pcg-down scripts/pcg-runtime scripts/pcg-eval $(DESTDIR)$(PREFIX)/bin
	$(if $(CUDA_LIB),install -D -m 755 $(CUDA_LIB) $(DESTDIR)$(PREFIX)/lib/pcg-tts/libpcg-cuda.so)
	for f in $$(find models/demo -type f); do \
		install -D -m 644 $$f $(DESTDIR)$(PREFIX)/share/pcg-tts/$$f; done
	for m in man/*.[1-8]; do \
		install -D -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$${m##*.}/$${m##*/}; done
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(PREFIX)/share/pcg-tts/systemd
	for f in deploy/systemd/*.service.in; do \
		sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@DATADIR@|$(PREFIX)/share/pcg-tts|g' $$f \
			>$(DESTDIR)$(SYSTEMDUNITDIR)/$$(basename $$f .in) && \
		chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$(basename $$f .in) || exit 1; done
	for f in deploy/systemd/*.conf.in; do \
		sed -e 's|@DATADIR@|$(PREFIX)/share/pcg-tts|g' $$f \
			>$(DESTDIR)$(PREFIX)/share/pcg-tts/systemd/$$(basename $$f .in) && \
		chmod 644 $(DESTDIR)$(PREFIX)/share/pcg-tts/systemd/$$(basename $$f .in) || exit 1; done
	install -m 644 deploy/systemd/pcg-tts.sysusers $(DESTDIR)$(SYSUSERSDIR)/pcg-tts.conf

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
