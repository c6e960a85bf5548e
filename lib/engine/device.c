/* device.c: the table of device kinds, --device parsing, and the question
 * of whether the device asked for is here. */
#include "device.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const pcg_device_kind cpu_kind = {
	.name = "cpu", .label = "CPU", .host = 1, .backend_open = pcg_cpu_backend_open,
};

/* Each other kind: its hooks in a build that has it (CUDA's open its
 * library on first use, lib/engine/cudaload.c), else an entry that says how to
 * get it. */
#ifdef PCG_CUDA
#include "cudaload.h"
#define CUDA_KIND pcg_cuda_lazy_kind
#else
static const pcg_device_kind cuda_missing = {
	.name = "cuda", .label = "CUDA", .indexed = 1,
	.missing = "rebuild with nvcc installed, make CUDA=1",
};
#define CUDA_KIND cuda_missing
#endif

/* The kinds --device names, in the order the usage message lists them. */
static const pcg_device_kind *const kinds[] = { &cpu_kind, &CUDA_KIND };
#define N_KINDS (sizeof kinds / sizeof kinds[0])

pcg_device pcg_device_cpu(void)
{
	return (pcg_device){ &cpu_kind, 0 };
}

/* s is a device number: digits only, at most INT_MAX. */
static int parse_index(const char *s, int *index)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	long n = strtol(s, &end, 10);
	if (*end != '\0' || errno != 0 || n > INT_MAX)
		return -1;
	*index = (int)n;
	return 0;
}

/* "cpu, cuda or cuda:N": every name the table takes, into buf. */
static const char *names(char *buf, size_t len)
{
	const char *item[2 * N_KINDS];
	char indexed[N_KINDS][32];
	size_t n = 0, at = 0;

	for (size_t i = 0; i < N_KINDS; i++) {
		item[n++] = kinds[i]->name;
		if (kinds[i]->indexed) {
			snprintf(indexed[i], sizeof indexed[i], "%s:N", kinds[i]->name);
			item[n++] = indexed[i];
		}
	}
	buf[0] = '\0';
	for (size_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s",
				       i == 0 ? "" : i + 1 == n ? " or " : ", ", item[i]);
	return buf;
}

int pcg_device_parse(const char *s, pcg_device *dev, pcg_err *err)
{
	char want[256];

	if (s == NULL || *s == '\0') {
		*dev = pcg_device_cpu();
		return 0;
	}
	for (size_t i = 0; i < N_KINDS; i++) {
		const pcg_device_kind *k = kinds[i];
		const size_t n = strlen(k->name);
		int index = 0;
		if (strncmp(s, k->name, n) != 0)
			continue;
		if (s[n] == '\0' ||
		    (k->indexed && s[n] == ':' && parse_index(s + n + 1, &index) == 0)) {
			*dev = (pcg_device){ k, index };
			return 0;
		}
	}
	return pcg_fail(err, "device '%s': want %s", s, names(want, sizeof want));
}

int pcg_device_check(pcg_device dev, pcg_err *err)
{
	const pcg_device_kind *k = dev.kind;
	char name[48];

	if (k->host)
		return 0;
	pcg_device_name(dev, name, sizeof name);
	if (k->missing != NULL)
		return pcg_fail(err, "device %s: this build has no %s backend (%s)", name, k->label,
				k->missing);
	int n = k->count(err);
	if (n < 0) {
		char what[64];
		snprintf(what, sizeof what, "device %s", name);
		pcg_err_prefix(err, what);
		return -1;
	}
	if (n == 0)
		return pcg_fail(err, "device %s: no %s device on this machine", name, k->label);
	if (dev.index >= n)
		return pcg_fail(err, "device %s: this machine has %d %s device%s", name, n,
				k->label, n == 1 ? "" : "s");
	return 0;
}

const char *pcg_device_name(pcg_device dev, char *buf, int len)
{
	if (dev.kind->indexed)
		snprintf(buf, (size_t)len, "%s:%d", dev.kind->name, dev.index);
	else
		snprintf(buf, (size_t)len, "%s", dev.kind->name);
	return buf;
}
