# Makefile — the two commands: `make run` and `make test`.  Both install what is missing
# (Debian packages, when root), configure and build in Release, then run.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
DEBS    := cmake g++ make pkg-config libtorch-dev libopenblas0-pthread libzmq3-dev libcjson-dev \
           libxxhash-dev libgloo-dev \
           libyaml-dev python3 python3-numpy python3-zmq python3-protobuf python3-yaml python3-pip \
           python3-setuptools iproute2 unicode-data bzip2 chromium prometheus

CONFIG  ?= configs/arith.json
ARGS    ?=

.PHONY: all deps configure build run test bench clean gpu-debs unicode-data install

all: build

deps:
	@missing=""; for p in $(DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else \
	    echo "missing Debian packages; run: sudo apt-get install$$missing"; exit 1; \
	  fi; \
	fi
	@# npm is optional: test_hf_tokenizer installs the reference tokenizers with it (skipped, saying
	@# so, without it); a failed install of it stops nothing
	@command -v npm >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null 2>&1 || \
	  echo "npm not installed: test_hf_tokenizer will be skipped"

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/baton run $(CONFIG) $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The benchmarks; bench_rollout's PyTorch peer needs Debian's python3-torch (installed here).
bench: build
	@$(MAKE) --no-print-directory deps DEBS=python3-torch
	@for b in $(BUILD)/bench_*; do case "$$b" in *bench_logits) continue;; esac; \
	  [ -x "$$b" ] && BATON_SOURCE_DIR=$(CURDIR) "$$b"; done

# bin/baton, lib/libbaton.so (the embedding API), include/baton/{baton,status}.h, baton.pc and the
# CMake package under PREFIX (README, "Embed it").
PREFIX  ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)

# text/unicode_data.c, the Unicode tables behind include/baton/unicode.h, is generated and
# committed: this rebuilds it from the Unicode Character Database that Debian's unicode-data
# installs (UCD=DIR for another copy), then test_unicode checks it against the same files.
UCD ?= /usr/share/unicode
unicode-data:
	mkdir -p $(BUILD)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -o $(BUILD)/gen_unicode tools/gen_unicode.c
	./$(BUILD)/gen_unicode $(UCD) text/unicode_data.c

# The Debian packages bench/gpu_check.sh unpacks on a GPU machine that lacks them (no package
# archive there): downloaded here as .deb files into build-debs/, to carry along.
GPU_DEBS := libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libcjson-dev libcjson1 \
            libxxhash-dev libgloo-dev libyaml-dev libyaml-0-2
gpu-debs:
	mkdir -p build-debs && cd build-debs && apt-get download $(GPU_DEBS)
