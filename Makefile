# Front door. `make test` installs what is missing, configures, builds and
# runs the whole suite; `make bench` runs the kernel lab on this machine.
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 20
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# A compiler cache, where one is installed, makes rebuilds of unchanged files free.
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
# Paths relative to the checkout, so a fresh clone elsewhere hits the same cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CUDA_COMPILER_LAUNCHER=$(CCACHE)
endif
APT_PACKAGES := cmake ninja-build g++ libgtest-dev libopenblas-dev liblapacke-dev libkissfft-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libpcre2-dev \
  clang libclang-rt-14-dev libomp-dev python3-venv libdnnl-dev

.PHONY: all build deps test sanitize tsan fuzz bench info install clean model

all: build

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The default model of `kiln generate` (no -m): a small byte-level Llama
# trained with Kiln on the licence texts Debian ships in base-files (about
# 5 minutes on 2 cores), written as GGUF next to the binary, where `kiln
# generate` looks for it.
model: build
	$(BUILD)/kiln train-model -o $(BUILD)/kiln-default.gguf

test: build
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS) --timeout 900

# The whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
sanitize: deps
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DKILN_SANITIZE=ON -DKILN_BUILD_TOOLS=OFF -DKILN_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && OMP_WAIT_POLICY=passive ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1800

# The concurrency tests under ThreadSanitizer. One thread per kernel keeps
# uninstrumented OpenMP (whose synchronization TSan cannot see) out of it.
tsan: deps
	cmake -S . -B $(BUILD_TSAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DKILN_TSAN=ON -DKILN_BUILD_TOOLS=OFF -DKILN_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target kiln_concurrency_tests
	cd $(BUILD_TSAN) && KILN_NUM_THREADS=1 OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) --timeout 900

# libFuzzer on the file parsers (GGUF, safetensors, npy): a clang build of
# the library with ASan/UBSan, each target run FUZZ_SECONDS from the seeds
# in tests/fuzz/corpus (new finds go to $(BUILD_FUZZ)/corpus). An input
# that allocates more than 256 MB is a failure: inputs are at most 64 KB.
fuzz: deps
	cmake -S . -B $(BUILD_FUZZ) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_TOOLS=OFF \
	  -DKILN_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target kiln_fuzz_gguf kiln_fuzz_safetensors kiln_fuzz_npy
	@# The fuzz build enables AVX-512 globally (CMakeLists.txt, KILN_FUZZ): on a CPU without it the
	@# targets die of an illegal instruction before parsing anything, so they are built but not run.
	@if ! grep -qw avx512f /proc/cpuinfo; then echo "fuzz: built; not run (this CPU has no AVX-512, which the fuzz build uses)"; exit 0; fi; \
	for t in gguf safetensors npy; do \
	  mkdir -p $(BUILD_FUZZ)/corpus/$$t && \
	  KILN_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BUILD_FUZZ)/kiln_fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -malloc_limit_mb=256 -rss_limit_mb=2048 -print_final_stats=1 \
	    $(BUILD_FUZZ)/corpus/$$t tests/fuzz/corpus/$$t || exit 1; \
	done

# MLX, the peer `kiln bench --mlx` times on every row right after Kiln: the
# mlx[cpu] wheel from PyPI in a venv of the build tree. Where pip cannot
# reach PyPI the bench runs without the MLX column and says so.
PEER_VENV ?= $(BUILD)/peer-venv
$(PEER_VENV)/mlx.ok:
	@echo "installing mlx[cpu] into $(PEER_VENV) (the bench's MLX peer)"
	@python3 -m venv $(PEER_VENV) && $(PEER_VENV)/bin/pip install -q --disable-pip-version-check "mlx[cpu]" && touch $@ \
	  || echo "make bench: no MLX peer (pip install mlx[cpu] failed); the table has no MLX column"

bench: build
	-@$(MAKE) -s --no-print-directory $(PEER_VENV)/mlx.ok
	@if [ -f $(PEER_VENV)/mlx.ok ]; then $(BUILD)/kiln bench --mlx --mlx-python $(PEER_VENV)/bin/python; \
	 else $(BUILD)/kiln bench; fi

info: build
	$(BUILD)/kiln info

install: build
	cmake --install $(BUILD) --prefix $(or $(PREFIX),/usr/local)
	@if [ -f $(BUILD)/kiln-default.gguf ]; then \
	  install -D -m 644 $(BUILD)/kiln-default.gguf $(or $(PREFIX),/usr/local)/share/kiln/kiln-default.gguf; fi

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_FUZZ)
