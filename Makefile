# Makefile — the two commands: `make run` and `make test`.  Both install what is missing
# (Debian packages, when root), configure and build in Release, then run.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
DEBS    := cmake g++ make pkg-config libtorch-dev libopenblas0-pthread libzmq3-dev libcjson-dev \
           libxxhash-dev libgloo-dev \
           python3-numpy python3-zmq iproute2

CONFIG  ?= configs/arith.json
ARGS    ?=

.PHONY: all deps configure build run test bench clean

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

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/baton run $(CONFIG) $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	@for b in $(BUILD)/bench_*; do [ -x "$$b" ] && "$$b"; done

clean:
	rm -rf $(BUILD)
