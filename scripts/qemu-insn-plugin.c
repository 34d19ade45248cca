// SPDX-License-Identifier: GPL-2.0
/*
 * A QEMU TCG plugin for `make bench --insn`: exact guest instruction counts
 * per translation block, between marks the guest sets.
 *
 * Under `-icount shift=0` a guest nanosecond is one instruction, so these
 * counts are the bench's CPU time, broken down exactly rather than sampled.
 * The guest marks a window by executing `xchg %bx,%bx` (66 87 db, a no-op
 * that nothing else uses): the first mark opens a window, the second closes
 * it and writes "<vaddr> <instructions>" for every block that ran in it to
 * OUT.<n> (n = 1, 2, ...). zcrx-bench --mark executes it around its
 * measured window; scripts/insn-profile.py maps the addresses to symbols.
 *
 * The counts cover every guest thread on every vCPU (the plugin cannot see
 * which task runs), so a window holds the receiver, its NAPI thread and the
 * sender alike; the resolver tells them apart by function.
 *
 * Build: cc -shared -fPIC -O2 -I<qemu>/include/qemu -o insn.so this.c
 * Use:   -plugin insn.so,out=PATH
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

struct block {
	uint64_t vaddr;
	uint64_t insns;
	uint64_t execs; /* bumped inline by the translated code */
	uint64_t base; /* execs when the window opened */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Blocks live until exit: the inline op points into them. */
static struct block **blocks;
static size_t nblocks, capblocks;
static int in_window;
static unsigned int windows;
static char *out;

static const unsigned char mark[] = { 0x66, 0x87, 0xdb };

static int by_vaddr(const void *a, const void *b)
{
	const struct block *x = *(struct block *const *)a;
	const struct block *y = *(struct block *const *)b;

	return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

static void close_window(void)
{
	char path[4096];
	FILE *f;
	size_t i;

	snprintf(path, sizeof(path), "%s.%u", out, ++windows);
	f = fopen(path, "w");
	if (!f) {
		qemu_plugin_outs("insn plugin: cannot write the window's counts\n");
		return;
	}
	qsort(blocks, nblocks, sizeof(*blocks), by_vaddr);
	/* One line per start address (a block may be translated again). */
	for (i = 0; i < nblocks;) {
		uint64_t va = blocks[i]->vaddr, n = 0;

		for (; i < nblocks && blocks[i]->vaddr == va; i++)
			n += (blocks[i]->execs - blocks[i]->base) * blocks[i]->insns;
		if (n)
			fprintf(f, "%" PRIx64 " %" PRIu64 "\n", va, n);
	}
	fclose(f);
}

static void on_mark(unsigned int vcpu, void *udata)
{
	size_t i;

	pthread_mutex_lock(&lock);
	if (!in_window) {
		for (i = 0; i < nblocks; i++)
			blocks[i]->base = blocks[i]->execs;
	} else {
		close_window();
	}
	in_window = !in_window;
	pthread_mutex_unlock(&lock);
}

static void on_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb), i;
	struct block *b = calloc(1, sizeof(*b));

	if (!b)
		return;
	b->vaddr = qemu_plugin_tb_vaddr(tb);
	b->insns = n;
	pthread_mutex_lock(&lock);
	if (nblocks == capblocks) {
		size_t cap = capblocks ? 2 * capblocks : 65536;
		struct block **nb = realloc(blocks, cap * sizeof(*nb));

		if (!nb) {
			pthread_mutex_unlock(&lock);
			free(b);
			return;
		}
		blocks = nb;
		capblocks = cap;
	}
	/* A block made while a window is open starts at 0 in it. */
	blocks[nblocks++] = b;
	pthread_mutex_unlock(&lock);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
						 &b->execs, 1);
	for (i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);

		if (qemu_plugin_insn_size(insn) == sizeof(mark) &&
		    !memcmp(qemu_plugin_insn_data(insn), mark, sizeof(mark)))
			qemu_plugin_register_vcpu_insn_exec_cb(
				insn, on_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
	}
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info, int argc,
					   char **argv)
{
	int i;

	for (i = 0; i < argc; i++)
		if (!strncmp(argv[i], "out=", 4))
			out = strdup(argv[i] + 4);
	if (!out) {
		fprintf(stderr, "insn plugin: needs out=PATH\n");
		return -1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
	return 0;
}
