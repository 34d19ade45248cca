// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
/*
 * A receiver written against the first released zcrx_rs uAPI header (1.0,
 * kept in v1/linux/zcrx_rs.h), the way a program of that time was written:
 * it zeroes reserved fields by name (__resv, __pad) rather than with a
 * memset, and uses only what 1.0 had (INFO, REGISTER_AREA, BIND, RECV,
 * STATS, UNBIND; one page per buffer; one refill entry per record).
 * scripts/uapi-compat.sh builds it against 1.0's header and against the
 * current one; the selftest runs the latter on the module of today.
 *
 *   zcrx-uapi-v1-recv IFNAME QUEUE PORT AREA_MIB OUTFILE
 *
 * binds the queue, accepts one TCP connection on PORT (IPv4 or IPv6),
 * writes every byte it receives to OUTFILE and prints
 *
 *   listening
 *   bytes B zero-copy Z copied C records R stats-zc Y stats-copy Y
 *
 * (B = Z + C, from the records' flags; the stats-* fields from STATS).
 * Exit status 0 when the stream ended normally, 1 on any error (errno
 * and what failed on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/zcrx_rs.h>

#define NR_RECS 64

static void die(const char *what)
{
	fprintf(stderr, "zcrx-uapi-v1-recv: %s: %s (errno %d)\n", what, strerror(errno), errno);
	exit(1);
}

/*
 * Refill entries due but not yet written: the ring can be full at times
 * (the kernel takes entries when its page pool refills, and RECV drains
 * the ring when it runs out of buffers), so they wait here.
 */
static uint64_t *pend;
static size_t nr_pend, cap_pend;

static void due(uint64_t off)
{
	if (nr_pend == cap_pend) {
		cap_pend = cap_pend ? 2 * cap_pend : 1024;
		pend = realloc(pend, cap_pend * sizeof(*pend));
		if (!pend)
			die("realloc");
	}
	pend[nr_pend++] = off;
}

/* Writes what fits of the due entries (oldest first), one per record. */
static void flush(struct zcrx_rs_rqe *rqes, uint32_t *khead, uint32_t *utail, uint32_t mask,
		  uint32_t page_size)
{
	uint32_t tail = __atomic_load_n(utail, __ATOMIC_RELAXED);
	size_t k = 0;

	while (k < nr_pend && tail - __atomic_load_n(khead, __ATOMIC_ACQUIRE) <= mask) {
		struct zcrx_rs_rqe *e = &rqes[tail & mask];

		e->off = pend[k++];
		e->len = page_size;
		e->__pad = 0;
		tail++;
	}
	__atomic_store_n(utail, tail, __ATOMIC_RELEASE);
	memmove(pend, pend + k, (nr_pend - k) * sizeof(*pend));
	nr_pend -= k;
}

static void write_all(int fd, const void *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write OUTFILE");
		p = (const char *)p + n;
		len -= (size_t)n;
	}
}

int main(int argc, char **argv)
{
	struct zcrx_rs_info info;
	struct zcrx_rs_area_reg reg;
	struct zcrx_rs_bind b;
	struct zcrx_rs_recv rcv;
	struct zcrx_rs_stats st;
	struct zcrx_rs_rec recs[NR_RECS];
	struct sockaddr_in6 sa;
	uint64_t bytes = 0, zc = 0, copied = 0, records = 0, area_len;
	unsigned int ifindex, queue, port, i;
	uint32_t *khead, *utail, mask;
	struct zcrx_rs_rqe *rqes;
	int fd, lfd, cfd, out, one = 1, off = 0;
	char *area, *ring;

	if (argc != 6) {
		fprintf(stderr, "usage: %s IFNAME QUEUE PORT AREA_MIB OUTFILE\n", argv[0]);
		return 2;
	}
	ifindex = if_nametoindex(argv[1]);
	if (!ifindex)
		die("if_nametoindex");
	queue = (unsigned int)strtoul(argv[2], NULL, 0);
	port = (unsigned int)strtoul(argv[3], NULL, 0);
	area_len = strtoull(argv[4], NULL, 0) << 20;
	out = open(argv[5], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (out < 0)
		die("open OUTFILE");

	fd = open("/dev/zcrx", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("open /dev/zcrx");
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, ZCRX_RS_IOC_INFO, &info))
		die("ZCRX_RS_IOC_INFO");
	if (info.api_version < ZCRX_RS_API_VERSION) {
		fprintf(stderr, "zcrx-uapi-v1-recv: API version %u < %u\n", info.api_version,
			ZCRX_RS_API_VERSION);
		return 1;
	}

	area = mmap(NULL, area_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		die("mmap area");
	reg.addr = (uint64_t)(uintptr_t)area;
	reg.len = area_len;
	reg.flags = 0;
	reg.area_id = 0;
	reg.__resv[0] = 0;
	reg.__resv[1] = 0;
	if (ioctl(fd, ZCRX_RS_IOC_REGISTER_AREA, &reg))
		die("ZCRX_RS_IOC_REGISTER_AREA");

	b.ifindex = ifindex;
	b.rxq = queue;
	b.rq_entries = 4096;
	b.flags = 0;
	memset(&b.offsets, 0, sizeof(b.offsets));
	b.mmap_len = 0;
	b.__resv[0] = 0;
	b.__resv[1] = 0;
	if (ioctl(fd, ZCRX_RS_IOC_BIND, &b))
		die("ZCRX_RS_IOC_BIND");
	ring = mmap(NULL, b.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ring == MAP_FAILED)
		die("mmap ring");
	khead = (uint32_t *)(ring + b.offsets.head);
	utail = (uint32_t *)(ring + b.offsets.tail);
	rqes = (struct zcrx_rs_rqe *)(ring + b.offsets.rqes);
	mask = b.rq_entries - 1;

	lfd = socket(AF_INET6, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket");
	if (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)))
		die("setsockopt");
	memset(&sa, 0, sizeof(sa));
	sa.sin6_family = AF_INET6;
	sa.sin6_addr = in6addr_any;
	sa.sin6_port = htons((uint16_t)port);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1))
		die("bind/listen");
	printf("listening\n");
	fflush(stdout);
	cfd = accept(lfd, NULL, NULL);
	if (cfd < 0)
		die("accept");

	for (;;) {
		int n;

		flush(rqes, khead, utail, mask, info.page_size);
		rcv.sockfd = cfd;
		rcv.flags = 0;
		rcv.recs = (uint64_t)(uintptr_t)recs;
		rcv.nr_recs = NR_RECS;
		rcv.__pad = 0;
		rcv.bytes = 0;
		rcv.__resv[0] = 0;
		rcv.__resv[1] = 0;
		n = ioctl(fd, ZCRX_RS_IOC_RECV, &rcv);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ENOBUFS) {
			/* The kernel drained the ring: room for what is due. */
			if (!nr_pend)
				usleep(1000);
			continue;
		}
		if (n < 0)
			die("ZCRX_RS_IOC_RECV");
		if (n == 0)
			break;
		for (i = 0; i < rcv.nr_recs; i++) {
			write_all(out, area + recs[i].off, recs[i].len);
			bytes += recs[i].len;
			if (recs[i].flags & ZCRX_RS_REC_COPY)
				copied += recs[i].len;
			else
				zc += recs[i].len;
			/* One entry per record; 1.0 had one page per buffer. */
			due(recs[i].off & ~(uint64_t)(info.page_size - 1));
		}
		records += rcv.nr_recs;
	}

	memset(&st, 0, sizeof(st));
	if (ioctl(fd, ZCRX_RS_IOC_STATS, &st))
		die("ZCRX_RS_IOC_STATS");
	if (ioctl(fd, ZCRX_RS_IOC_UNBIND))
		die("ZCRX_RS_IOC_UNBIND");
	printf("bytes %" PRIu64 " zero-copy %" PRIu64 " copied %" PRIu64 " records %" PRIu64
	       " stats-zc %" PRIu64 " stats-copy %" PRIu64 "\n",
	       bytes, zc, copied, records, (uint64_t)st.zc_bytes, (uint64_t)st.copy_bytes);
	if (close(out))
		die("close OUTFILE");
	close(cfd);
	close(lfd);
	close(fd);
	return 0;
}
