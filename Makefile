# Thin front for the README commands; the real build is CMake (CMakeLists.txt).
#   make            build build/mlxcel and build/mlxcel-server (Release, CPU)
#   make demo       set up packages, build, and run the demo model
#   make test       run the whole suite (normal build, then ASan/UBSan build); last line N passed, N failed
#   make test-fast  the suite on the normal build only
#   make cuda       build with the CUDA backend into build-cuda/
JOBS ?= $(shell nproc)

.PHONY: all build demo test test-fast test-asan cuda clean setup fuzz

all: build

setup:
	@bash scripts/setup.sh

build:
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j $(JOBS) >build/build.log 2>&1 || { tail -40 build/build.log; echo "build failed (full log: build/build.log)"; exit 1; }
	@echo "built build/mlxcel and build/mlxcel-server"

build-asan:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMLXCEL_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)

demo: setup build
	./build/mlxcel generate -m models/fortune-6m-mlx-q4 -p "A wise man once said" -n 64 --no-chat-template

test: setup
	@bash tests/run.sh all

test-fast:
	@bash tests/run.sh release

test-asan:
	@bash tests/run.sh asan

cuda:
	@cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON >/dev/null
	@cmake --build build-cuda -j $(JOBS)

fuzz:
	@cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DMLXCEL_FUZZ=ON -DCMAKE_C_COMPILER=clang >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

clean:
	rm -rf build build-asan build-cuda build-fuzz
