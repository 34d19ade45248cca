# SPDX-License-Identifier: GPL-2.0
#
# zcrx-rs: top-level entry points. `make help` lists them.
#
# Everything downloaded or built for the kernel lives in $(ZCRX_CACHE)
# (default ~/.cache/zcrx-rs), never in this repository.

FLAVOUR    ?= fast
# The kernel: 7.2 (default) or 7.3; each has its own tree and builds in the
# cache (scripts/lib.sh).
KVER       ?= 7.2
ZCRX_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/zcrx-rs
export ZCRX_CACHE KVER

TOP        := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
KSUFFIX    := $(if $(filter-out 7.2,$(KVER)),-$(KVER))
KDIR       := $(ZCRX_CACHE)/build$(KSUFFIX)/$(FLAVOUR)
KSRC       := $(ZCRX_CACHE)/linux$(KSUFFIX)/src
MODOUT     := $(KDIR)/zcrx-module
KO         := $(MODOUT)/rust/zcrx_rs.ko
CARGO      ?= cargo
TOOLS_BIN  := $(TOP)/tools/target/release

# The same environment the kernel was built with (scripts/lib.sh: kbuild_env).
KMAKE = $(MAKE) -C $(KDIR) M=$(TOP) MO=$(MODOUT) LLVM=-19 \
	LIBCLANG_PATH=/usr/lib/llvm-19/lib \
	RUST_LIB_SRC=$$(cat $(ZCRX_CACHE)/rust-lib-src)

.PHONY: all help toolchain kernel module iou-zcrx ncdevmem tools libzcrx install uninstall rust-analyzer \
	check check-fast demo bench bench-wall bench-scale fuzz fuzz-net soak mutants prove-fixes tree-tests check-plants patches clean distclean-kernel

all: module

help:
	@echo "make demo          build everything, boot the VM, run the demo"
	@echo "make check         build everything and run all tests (host, fast VM, debug VM)"
	@echo "make check-fast    the same without the debug kernel"
	@echo "make               build the module against the cached kernel"
	@echo "                   (KVER=7.3 for Linux 7.3 instead of 7.2, with any target)"
	@echo "make toolchain     install/download the toolchain (scripts/toolchain.sh)"
	@echo "make kernel        fetch, patch, configure and build the test kernel"
	@echo "                   (FLAVOUR=fast|debug; scripts/kernel.sh --help)"
	@echo "make module        the module, what plain make builds (FLAVOUR=fast|debug)"
	@echo "make iou-zcrx      the kernel tree's io_uring zcrx test program and the XDP program (the baseline)"
	@echo "make ncdevmem      the kernel tree's devmem TCP test program"
	@echo "make tools         build the userspace tools (tools/: cargo, libzcrx, C example)"
	@echo "make libzcrx       libzcrx into a staging prefix under tools/target, its epoll example,"
	@echo "                   the uAPI compatibility programs and the selftest's record-noting library"
	@echo "make install       install libzcrx (library, zcrx.h, zcrx.pc, man pages; PREFIX=/usr/local)"
	@echo "make uninstall     remove what make install installed (same PREFIX)"
	@echo "make bench         zcrx-rs vs io_uring zcrx vs recv(): table of medians (repeatable:"
	@echo "                   instruction-counted clock, one vCPU; BENCH_ARGS=... for more)"
	@echo "make bench-wall    the same on two vCPUs against the host's clock (scatters +-20%)"
	@echo "make bench-scale   cost vs write size and flows: tables, JSON and an SVG chart"
	@echo "make fuzz          the uAPI fuzzer on the debug kernel (FUZZ_S=600, FUZZ_SEED=...)"
	@echo "make fuzz-net      the remote packet fuzzer on the debug kernel (FUZZ_NET_S=600, FUZZ_NET_SEED=..., FUZZ_NET_MIN=...)"
	@echo "make soak          long streams with queue restarts and rebinds (SOAK_S=1800, SOAK_FLAVOUR=debug)"
	@echo "make mutants       mutation testing: each bug of scripts/mutants.txt planted in turn, the whole"
	@echo "                   fast suite run against it; every one must be killed (MUTANTS=\"a b\" for some,"
	@echo "                   MUTANTS_FAIL_FAST=1 to stop each at its first failed test)"
	@echo "make prove-fixes   each fix of the series taken out in turn (scripts/patches/proofs): the kernel"
	@echo "                   built without it must fail its tests with the splat it is about"
	@echo "                   (PROVE=\"6 13\" for some; 13 min, then 1-3 min a fix, 5-12 for 6, 8, 22)"
	@echo "make tree-tests    the kernel tree's netdevsim selftests, case by case: pristine 7.2 kernel,"
	@echo "                   stock netdevsim, ours (TREE_BASELINE=0: no pristine kernel)"
	@echo "make check-plants  make check in a clone with the defects of scripts/plants/ planted:"
	@echo "                   it must fail, and name each of them"
	@echo "make patches       the kernel series as three sendable series (net, net-next, RFC) with"
	@echo "                   cover letters in out/patches, authored by you (git config user.*;"
	@echo "                   SIGNOFF=1 adds your Signed-off-by)"
	@echo "make rust-analyzer write rust-project.json for the module"
	@echo "make clean         clean the module's build (this FLAVOUR and KVER) and tools/target"
	@echo "make distclean-kernel  drop the kernel tree and builds from the cache"

toolchain:
	@$(TOP)/scripts/toolchain.sh

kernel: toolchain
	@$(TOP)/scripts/kernel.sh --flavour $(FLAVOUR)

module: kernel
	@$(TOP)/scripts/stage.sh --lock build-$(FLAVOUR) module $(KMAKE) --no-print-directory -s ZCRX_KUNIT=1 modules
	@echo "==> module: $(KO)"

# The kernel tree's own io_uring zcrx selftest program (the baseline), and
# the XDP program the selftest attaches.
iou-zcrx: kernel
	@$(TOP)/scripts/build-iou-zcrx.sh --flavour $(FLAVOUR)
	@clang-19 -O2 -target bpf -c $(TOP)/tools/selftest/xdp_pass.c -o $(KDIR)/xdp-pass.o

# the tree's devmem TCP test program (the tree-tests run devmem.py with it)
ncdevmem: kernel
	@$(TOP)/scripts/build-ncdevmem.sh --flavour $(FLAVOUR)

rust-analyzer: kernel
	$(KMAKE) rust-analyzer
	@ln -sf $(MODOUT)/rust-project.json $(TOP)/rust-project.json 2>/dev/null || true

tools: toolchain libzcrx
	@$(TOP)/scripts/stage.sh --lock tools tools $(CARGO) build --release --quiet --manifest-path $(TOP)/tools/Cargo.toml

# libzcrx, installed into a staging prefix under tools/target, and its epoll
# example built the way a user builds it: cc + pkg-config (plus an rpath to
# the staging prefix, so it runs from there without LD_LIBRARY_PATH).
LIBZCRX_O      := $(TOP)/tools/target/libzcrx
LIBZCRX_STAGE  := $(LIBZCRX_O)/prefix
libzcrx:
	@$(MAKE) --no-print-directory -s -C $(TOP)/tools/libzcrx O=$(LIBZCRX_O)/build \
		PREFIX=$(LIBZCRX_STAGE) WERROR=1 install
	@mkdir -p $(TOOLS_BIN)
	@PKG_CONFIG_PATH=$(LIBZCRX_STAGE)/lib/pkgconfig sh -c 'cc $(TOP)/tools/libzcrx/examples/epoll-server.c \
		$$(pkg-config --cflags --libs zcrx) -Wl,-rpath,$(LIBZCRX_STAGE)/lib -o $(TOOLS_BIN)/zcrx-epoll-server'
	@$(TOP)/scripts/uapi-compat.sh --out $(TOOLS_BIN) > /dev/null
	@cc -O2 -Wall -Wextra -Werror -shared -fPIC -I$(TOP)/tools/include/uapi $(TOP)/tools/selftest/recnote.c \
		-o $(TOOLS_BIN)/libzcrx-recnote.so -ldl -lpthread

PREFIX ?= /usr/local
install:
	@$(MAKE) --no-print-directory -C $(TOP)/tools/libzcrx O=$(LIBZCRX_O)/build PREFIX=$(PREFIX) install
uninstall:
	@$(MAKE) --no-print-directory -C $(TOP)/tools/libzcrx PREFIX=$(PREFIX) uninstall

# All tests: host tests, the full suite on the fast kernel, then the
# reliability suite on the debug kernel (KASAN, lockdep, kmemleak).
# scripts/check.sh --build does the builds itself, one after the other: the
# debug kernel and its suite, then the fast kernel, the host checks, the fast
# suite and the tree's selftests.
check: toolchain
	@$(TOP)/scripts/check.sh --build --flavour fast --debug

# Only the fast kernel (no debug kernel build): for quick iterations.
check-fast: module iou-zcrx ncdevmem tools
	@$(TOP)/scripts/check.sh --flavour $(FLAVOUR)

# The benchmark: zcrx-rs vs io_uring zcrx vs recv() vs recv(MSG_TRUNC).
# The repeatable set-up (instructions counted, one vCPU), the wall-clock
# one (two vCPUs, the receiver alone on one), and how the cost grows.
bench: module tools
	@$(TOP)/scripts/bench.sh --icount 0 --cpus 1 $(BENCH_ARGS)

bench-wall: module tools
	@$(TOP)/scripts/bench.sh $(BENCH_ARGS)

bench-scale: module tools
	@$(TOP)/scripts/bench.sh --icount 0 --cpus 1 --scale $(BENCH_ARGS)

# Mutation testing (scripts/mutants.sh): the suite must fail on each
# planted bug. Full suite per mutant: about 4 min each on the fast kernel.
mutants: module iou-zcrx ncdevmem tools
	@$(TOP)/scripts/mutants.sh --flavour $(FLAVOUR) $(if $(MUTANTS_FAIL_FAST),--fail-fast) run $(MUTANTS)

# Mutation testing of the kernel series (scripts/prove-fixes.sh): without
# each fix, its tests must fail as the fix says they did.
prove-fixes: tools
	@$(MAKE) --no-print-directory FLAVOUR=fast kernel
	@$(TOP)/scripts/prove-fixes.sh $(PROVE)

# The kernel tree's netdevsim selftests, case by case: the pristine release
# kernel (built once, TREE_BASELINE=0 leaves it out), stock netdevsim on ours,
# our netdevsim; make check runs a short list without the baseline.
TREE_BASELINE ?= 1
tree-tests: kernel iou-zcrx ncdevmem
	@FLAVOUR=$(FLAVOUR) TREE_BASELINE=$(TREE_BASELINE) $(TOP)/scripts/tree-tests.sh

# The uAPI fuzzer on the debug kernel; make check runs a short one.
fuzz: tools
	@$(MAKE) --no-print-directory FLAVOUR=debug module
	@$(TOP)/scripts/fuzz.sh

# The remote packet fuzzer (a hostile peer) on the debug kernel; make check
# runs a short one.
FUZZ_NET_FLAVOUR ?= debug
fuzz-net: tools
	@$(MAKE) --no-print-directory FLAVOUR=$(FUZZ_NET_FLAVOUR) module
	@FUZZ_NET_FLAVOUR=$(FUZZ_NET_FLAVOUR) $(TOP)/scripts/fuzz-net.sh

# Long streams while queues restart and receivers rebind; make check runs a
# short one.
SOAK_FLAVOUR ?= debug
soak: tools
	@$(MAKE) --no-print-directory FLAVOUR=$(SOAK_FLAVOUR) module
	@FLAVOUR=$(SOAK_FLAVOUR) $(TOP)/scripts/soak.sh

# make check must fail on each defect of scripts/plants/ (a clone of HEAD).
check-plants: toolchain
	@$(TOP)/scripts/check-plants.sh $(PLANTS)

# The series split by target tree, authored by the sender (scripts/kpatch.sh send).
patches: toolchain
	@$(TOP)/scripts/kernel.sh source
	@$(TOP)/scripts/kpatch.sh send $(TOP)/out/patches

demo: module iou-zcrx tools
	@$(TOP)/scripts/demo.sh --flavour $(FLAVOUR)

clean:
	-[ -d $(KDIR) ] && $(KMAKE) clean
	$(CARGO) clean --manifest-path $(TOP)/tools/Cargo.toml

distclean-kernel:
	rm -rf $(ZCRX_CACHE)/linux$(KSUFFIX)/src $(ZCRX_CACHE)/linux$(KSUFFIX)/dev $(ZCRX_CACHE)/build$(KSUFFIX)
