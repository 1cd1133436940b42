# Makefile - one commented target per build flavour.
#
#   make          debug build (-O0 -g3, plain-loop kernels): build/infer, made to be
#                 stepped through in gdb
#   make fast     optimised build: build/fast/infer, build/fast/serve (the HTTP
#                 server) and the tools (what run and bench use)
#   make test     every test, built with AddressSanitizer + UBSan, in build/asan/
#                 (and the debug build, for the gdb walkthroughs of notes/gdb)
#   make fuzz     libFuzzer targets (clang), each run FUZZ_SECONDS over its corpus
#   make soak     10,000 mixed requests through the runtime, then 10,000 through
#                 the HTTP server; checks nothing leaks
#   make exercise EX=NAME   one exercise of exercises/ (your mine.c, else the
#                 handout), judged by the tests it lists (exercises/README.md)
#   make exercise-check     every exercise: its handout and its wrong answer
#                 fail, the solution passes (make test runs it too)
#   make run      installs what is missing, builds fast, runs the default model
#   make bench    single-stream speed table on benchmark-shaped random models
#   make train    reproduces the default model data/shakespeare.gguf
#   make clean
#
# Layout: src/ is the engine (a static library): the seven stages on top, each other job in a folder of its own (notes/stages.md); src/front/infer.c is the CLI's
# main, src/front/serve.c the HTTP server's; tools/*.c are programs; tests/test_*.c are cmocka suites;
# tests/fuzz/fuzz_*.c are fuzz targets, with their corpora beside them.

CC      ?= gcc
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wvla-larger-than=65536
# OpenBLAS's OpenMP build, named explicitly: it shares libgomp's thread pool
# with our own kernels. The default pthread build keeps a second pool of
# spinning threads that fights OpenMP's for the same cores (see src/kernels/ops.c).
BLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
# -ffp-contract=off: the compiler never fuses a multiply and an add on its
# own (GCC's default for GNU C does, and how depends on -march and -mtune):
# a fused operation is one the source writes (fmaf, _mm512_fmadd_ps), so the
# same source gives the same bits in every flavour and on every CPU the same
# kernels run on (notes/training.md, "Determinism").
BASE    := -std=gnu11 -D_GNU_SOURCE -ffp-contract=off -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp -Isrc $(WARN)
LIBS    := -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas -lpcre2-8 -lcjson -lm -lpthread
FIXTURES ?= ../shared/fixtures

PROG_SRC := src/front/infer.c src/front/serve.c
LIB_SRC  := $(filter-out $(PROG_SRC),$(wildcard src/*.c src/*/*.c))
SRC_H    := $(wildcard src/*.h src/*/*.h)
TOOL_SRC := $(wildcard tools/*.c)
TOOL_H   := $(wildcard tools/*.h) $(SRC_H)
TEST_SRC := $(wildcard tests/test_*.c)

# Flavours: objects never mix between them. The debug build starts on the
# plain-loop kernels (src/kernels/ops.h, OPS_PLAIN), so that gdb steps from the forward
# pass into the loops that compute; a program that calls ops_isa_from_env takes
# LLM_ISA=best (or avx512, generic) instead. The others start at the best the
# CPU has.
DEBUG_FLAGS := $(BASE) -O0 -g3 -DOPS_DEFAULT_ISA=OPS_PLAIN
FAST_FLAGS  := $(BASE) -O3 -march=native -g -DNDEBUG
# The sanitized build keeps line tables (a report names file and line) but
# not variable locations: tracking them through the instrumented SIMD kernels
# was half of that build's time (quant_avx512.c 92 s -> 47 s on a Zen 3).
# gdb is for the debug build.
ASAN_FLAGS  := $(BASE) -O1 -g -fno-var-tracking -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined,float-cast-overflow

.PHONY: all fast cuda cuda-compile test run bench train clean deps fuzz fuzz-build fuzz-deps soak exercise exercise-check
all: build/infer build/serve $(patsubst tools/%.c,build/%,$(TOOL_SRC))
fast: build/fast/infer build/fast/serve $(patsubst tools/%.c,build/fast/%,$(TOOL_SRC))

# --- debug ---------------------------------------------------------------
build/obj/%.o: src/%.c $(SRC_H) | deps
	@mkdir -p $(dir $@)
	$(CC) $(DEBUG_FLAGS) -c $< -o $@
build/libengine.a: $(patsubst src/%.c,build/obj/%.o,$(LIB_SRC))
	rm -f $@ && ar rcs $@ $^
build/infer build/serve: build/%: src/front/%.c build/libengine.a
	$(CC) $(DEBUG_FLAGS) $^ -o $@ $(LIBS)
build/%: tools/%.c build/libengine.a $(TOOL_H)
	$(CC) $(DEBUG_FLAGS) $(filter-out %.h,$^) -o $@ $(LIBS)

# --- fast ----------------------------------------------------------------
build/fast/obj/%.o: src/%.c $(SRC_H) | deps
	@mkdir -p $(dir $@)
	$(CC) $(FAST_FLAGS) -c $< -o $@
build/fast/libengine.a: $(patsubst src/%.c,build/fast/obj/%.o,$(LIB_SRC))
	rm -f $@ && ar rcs $@ $^
build/fast/infer build/fast/serve: build/fast/%: src/front/%.c build/fast/libengine.a
	$(CC) $(FAST_FLAGS) $^ -o $@ $(LIBS)
build/fast/%: tools/%.c build/fast/libengine.a $(TOOL_H)
	$(CC) $(FAST_FLAGS) $(filter-out %.h,$^) -o $@ $(LIBS)

# --- cuda ----------------------------------------------------------------
# make cuda: the same programs with the forward pass on an NVIDIA GPU
# (--device cuda; notes/cuda.md), in build/cuda/, plus kcheck, which runs
# every CUDA kernel against its C reference. Builds where nvcc is (CUDA 13,
# Hopper: sm_90); runs where a GPU is. The C objects are built for any
# x86-64-v3 CPU, since a GPU machine's CPU need not be this one; -fmad=false
# keeps nvcc from fusing what the source does not fuse (as -ffp-contract=off).
CUDA_HOME ?= /usr/local/cuda
NVCC       := $(CUDA_HOME)/bin/nvcc
NVFLAGS    := -arch=sm_90 -std=c++20 -O3 -fmad=false -lineinfo -Werror all-warnings \
              -Xcompiler -Wall,-Wextra,-Wno-unused-parameter -Isrc
CUDA_CFLAGS := $(BASE) -O3 -g -DNDEBUG -march=x86-64-v3
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
CUDA_SRC   := $(wildcard src/kernels/*.cu)
CUDA_DEPS  := $(wildcard src/kernels/*.cuh src/kernels/*.h) src/base/err.h src/rans.h
CUDA_OBJ   := $(patsubst src/kernels/%.cu,build/cuda/cu/%.o,$(CUDA_SRC))
CUDA_TOOLS := bench bench_batch mkmodel gpucheck compress
cuda: build/cuda/infer build/cuda/serve build/cuda/kcheck $(patsubst %,build/cuda/%,$(CUDA_TOOLS))
build/cuda/cu/%.o: src/kernels/%.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
build/cuda/obj/%.o: src/%.c $(SRC_H) | deps
	@mkdir -p $(dir $@)
	$(CC) $(CUDA_CFLAGS) -c $< -o $@
# every library object but gpu_none.o: the kernels stand in its place
build/cuda/libengine.a: $(patsubst src/%.c,build/cuda/obj/%.o,$(filter-out src/kernels/gpu_none.c,$(LIB_SRC)))
	rm -f $@ && ar rcs $@ $^
build/cuda/infer build/cuda/serve: build/cuda/%: src/front/%.c $(CUDA_OBJ) build/cuda/libengine.a
	$(CC) $(CUDA_CFLAGS) $^ -o $@ $(LIBS) $(CUDA_LIBS)
$(patsubst %,build/cuda/%,$(CUDA_TOOLS)): build/cuda/%: tools/%.c $(CUDA_OBJ) build/cuda/libengine.a $(TOOL_H)
	$(CC) $(CUDA_CFLAGS) $(filter-out %.h,$^) -o $@ $(LIBS) $(CUDA_LIBS)
build/cuda/tools/kcheck.o: tools/kcheck.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
build/cuda/kcheck: build/cuda/tools/kcheck.o $(CUDA_OBJ) build/cuda/libengine.a
	$(CC) $(CUDA_CFLAGS) $^ -o $@ $(LIBS) $(CUDA_LIBS)

# make test's CUDA suite (tests/cuda.sh): every CUDA source compiled (-Werror)
# and infer and kcheck linked against the test build's library. Nothing runs
# on a GPU; where nvcc is missing the suite says it skipped.
cuda-compile: $(CUDA_OBJ) build/cuda/tools/kcheck.o build/asan/libengine.a
	$(CC) $(ASAN_FLAGS) src/front/infer.c $(CUDA_OBJ) build/asan/libengine.a -o build/cuda/infer-asan $(LIBS) $(CUDA_LIBS)
	$(CC) $(ASAN_FLAGS) build/cuda/tools/kcheck.o $(CUDA_OBJ) build/asan/libengine.a -o build/cuda/kcheck-asan \
	    $(LIBS) $(CUDA_LIBS)

# rans_bench compares the codec with zstd: it alone links libzstd.
build/rans_bench build/fast/rans_bench build/asan/rans_bench: LIBS += -lzstd

# --- tests (sanitizers on) -----------------------------------------------
build/asan/obj/%.o: src/%.c $(SRC_H) | deps
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) $(ASAN_OPT) -c $< -o $@
# The kernels' loops (and the forward pass's own, in model.c) run a hundred
# times longer under the sanitizers than anything else; optimised (still
# instrumented), the model suites take a fraction of the time.
# (and the float64 references the model suite computes them against)
build/asan/obj/kernels/%.o build/asan/obj/model.o build/asan/tobj/test_model.o: ASAN_OPT := -O2
# Where the CPU has FMA, the kernels' fmaf is one instruction rather than a
# call into libm for every weight (the generic path's F16 and BF16 loops ran
# fifty times slower without); fmaf's result is the same either way.
HOST_FMA := $(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
build/asan/obj/kernels/%.o: ASAN_OPT += $(HOST_FMA)
build/asan/libengine.a: $(patsubst src/%.c,build/asan/obj/%.o,$(LIB_SRC))
	rm -f $@ && ar rcs $@ $^
build/asan/infer build/asan/serve: build/asan/%: src/front/%.c build/asan/libengine.a
	$(CC) $(ASAN_FLAGS) $^ -o $@ $(LIBS)
build/asan/%: tools/%.c build/asan/libengine.a $(TOOL_H)
	$(CC) $(ASAN_FLAGS) $(filter-out %.h,$^) -o $@ $(LIBS)
# Test objects are kept apart from their link: an exercise links them again
# with its own version of one library object (tools/exercise.sh).
TEST_OBJ := $(patsubst tests/%.c,build/asan/tobj/%.o,$(TEST_SRC))
.SECONDARY: $(TEST_OBJ)
build/asan/tobj/test_%.o: tests/test_%.c tests/testutil.h tests/utf8_ref.h $(SRC_H) | deps
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) $(ASAN_OPT) -Itests -c $< -o $@
build/asan/test_%: build/asan/tobj/test_%.o build/asan/libengine.a
	$(CC) $(ASAN_FLAGS) $^ -o $@ $(LIBS) -lcmocka

# The fuzz targets replayed over their corpora (tests/fuzz.sh): the same
# sources as make fuzz, built with gcc and linked with a small driver.
FUZZ_SRC    := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,build/asan/%,$(FUZZ_SRC))
build/asan/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz.h tests/utf8_ref.h build/asan/libengine.a
	$(CC) $(ASAN_FLAGS) -Itests/fuzz $(filter %.c,$^) build/asan/libengine.a -o $@ $(LIBS)

# The tools the shell tests run (tests/train.sh, tests/tools.sh, tests/soak.sh,
# tests/server.sh).
TESTED_TOOLS := $(patsubst %,build/asan/%,train mkmodel bench kbench bpe_train soak mkcorpus compress bench_serve \
                  bench_batch gpucheck ceilings rows8_ab) \
                $(FUZZ_REPLAY)

# Tests run one binary at a time; each prints cmocka's summary. OMP/BLAS
# threads are kept at 2 so the suite fits a 2-core machine.
# tests/exercises.sh builds each exercise's variants from these objects, with
# the flags and libraries given here.
EX_ENV = CC="$(CC)" EX_FLAGS="$(ASAN_FLAGS)" EX_LIBS="$(LIBS)" FIXTURES=$(FIXTURES)
# tests/gdb.sh steps through the debug build: the walkthroughs of notes/gdb.
# The builds are independent of each other, so make test builds on every
# core (the tests themselves run one at a time, each with 2 threads).
TEST_BUILD := $(patsubst tests/%.c,build/asan/%,$(TEST_SRC)) build/asan/infer build/asan/serve $(TESTED_TOOLS) \
              build/infer build/rans_bench build/fast/infer build/fast/train
NPROC := $(shell nproc 2>/dev/null || echo 2)
test:
	@$(MAKE) --no-print-directory -j$(NPROC) $(TEST_BUILD)
	@$(EX_ENV) INFER=build/asan/infer sh tests/run_all.sh $(patsubst tests/%.c,build/asan/%,$(TEST_SRC))

# --- exercises (exercises/README.md) ---------------------------------------
exercise: $(patsubst tests/%.c,build/asan/%,$(TEST_SRC))
	@$(EX_ENV) sh tools/exercise.sh run $(EX)
exercise-check: $(patsubst tests/%.c,build/asan/%,$(TEST_SRC))
	@$(EX_ENV) sh tools/exercise.sh check

# --- running -------------------------------------------------------------
DEFAULT_MODEL ?= data/shakespeare.gguf
# OpenBLAS picks its kernels by the CPU it detects, and inside some virtual
# machines it detects an older one (Haswell, even Prescott). Where the CPU has
# AVX-512, its SkylakeX kernels are right and prefill's sgemm is several times
# faster, so run and bench ask for them; elsewhere OpenBLAS's own choice
# stands. The tests keep the environment's choice (they need no speed).
FAST_BLAS := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo OPENBLAS_CORETYPE=SkylakeX)
run: fast
	$(FAST_BLAS) build/fast/infer --model $(DEFAULT_MODEL) --prompt "ROMEO:" -n 250 --temperature 0.8 --seed 42 --trace

# --- the default model -----------------------------------------------------
# make train reproduces data/shakespeare.gguf, byte for byte on any x86-64
# CPU (notes/training.md has the figures, and "Determinism" for why the
# bytes do not depend on the machine; they do depend on --threads 2): a BPE
# vocabulary learned from the training split; three teachers, one recipe
# with seeds 1, 2 and 3; then the model, a student of the same shape trained
# towards the teachers' averaged probabilities (--teacher, --distill), with
# less dropout than they had.
CORPUS      ?= ../shared/corpus/tinyshakespeare.txt
VOCAB       ?= 2048
TRAIN_ARGS  ?= --dim 256 --hidden 704 --layers 6 --heads 8 --kv-heads 2 --ctx 256 --batch 8 \
               --steps 2000 --warmup 100 --lr 1e-3 --min-lr 1e-4 --dropout 0.3 --wd 0.1 --ema 0.999
TEACHERS    ?= 1 2 3
STUDENT     ?= --seed 1 --dropout 0.2 --distill 0.7
TRAIN_RUN    = build/fast/train --tokenizer build/shakespeare-tok.gguf --corpus $(CORPUS) --threads 2 \
               --eval-every 250 --resume $(TRAIN_ARGS)
train: fast
	build/fast/bpe_train --input $(CORPUS) --vocab $(VOCAB) --out build/shakespeare-tok.gguf
	for s in $(TEACHERS); do $(TRAIN_RUN) --seed $$s --out build/teacher-$$s.gguf --log build/teacher-$$s.csv \
	    --checkpoint build/teacher-$$s.ckpt || exit 1; done
	$(TRAIN_RUN) $(STUDENT) --out $(DEFAULT_MODEL) --log build/train-log.csv --checkpoint build/model.ckpt \
	    $(patsubst %,--teacher build/teacher-%.gguf,$(TEACHERS))
	CPT=2.89 sh tools/loss_svg.sh build/train-log.csv notes/training-loss.svg
	md5sum $(patsubst %,build/teacher-%.gguf,$(TEACHERS)) $(DEFAULT_MODEL)

bench: fast
	$(FAST_BLAS) sh tools/bench.sh

# --- fuzzing -----------------------------------------------------------------
# make fuzz builds one libFuzzer target per input surface with clang (Debian's
# clang and libclang-rt-14-dev; tools/deps.sh fuzz installs them) and runs each
# for FUZZ_SECONDS over a copy of its corpus in build/fuzz/corpus/, printing
# execs, coverage and corpus size; a crash leaves its input in
# build/fuzz/artifacts/ (see notes/reliability.md). Single-threaded: no
# OpenMP, so every run of an input takes the same path.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_SAN     := -fsanitize=address,undefined,float-cast-overflow,float-divide-by-zero -fno-sanitize-recover=all
FUZZ_FLAGS   := -std=gnu11 -D_GNU_SOURCE -I/usr/include/x86_64-linux-gnu/openblas-openmp -Isrc \
                -Wall -Wextra -Wshadow -Wno-unused-parameter -Wno-source-uses-openmp \
                -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN)
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRC))
build/fuzz/obj/%.o: src/%.c $(SRC_H) | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
# clang 14 cannot compile ops.c's check for "f16c": see tests/fuzz/cpu_supports.h.
build/fuzz/obj/kernels/ops.o: FUZZ_FLAGS += -include tests/fuzz/cpu_supports.h
build/fuzz/obj/kernels/ops.o: tests/fuzz/cpu_supports.h
build/fuzz/libengine.a: $(patsubst src/%.c,build/fuzz/obj/%.o,$(LIB_SRC))
	rm -f $@ && ar rcs $@ $^
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h build/fuzz/libengine.a
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -Itests/fuzz $< build/fuzz/libengine.a -o $@ $(LIBS)
fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	@sh tools/fuzz.sh $(FUZZ_SECONDS) $(notdir $(FUZZ_BINS))
fuzz-deps:
	@sh tools/deps.sh fuzz

# --- soak ----------------------------------------------------------------------
# make soak: SOAK_REQUESTS mixed requests (priorities, samples, stop strings,
# cancels, arrivals over time) through the runtime on the default model with a
# small KV pool, then every check of tools/soak.c (nothing lost, no block
# held, heap and RSS flat). make test runs a short one under ASan.
SOAK_REQUESTS ?= 10000
# Then the same through HTTP (tools/soak_serve.sh): SOAK_REQUESTS requests
# from bench_serve to build/fast/serve, some leaving mid-stream; nothing
# held, RSS flat.
soak: build/fast/soak build/fast/serve build/fast/bench_serve
	build/fast/soak --model $(DEFAULT_MODEL) --requests $(SOAK_REQUESTS)
	sh tools/soak_serve.sh $(SOAK_REQUESTS)

# Installs Debian packages that are missing (as root), or says how.
deps:
	@sh tools/deps.sh

clean:
	rm -rf build
