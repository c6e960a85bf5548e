/* test_device.c: --device names through the table of device kinds
 * (lib/engine/device.h): what parses to which kind and index, the message for a
 * name that does not, the printed names, and that the CPU is always
 * usable while a GPU that is not there (no device, or a build without its
 * backend) is an error naming it. */
#include <string.h>

#include "backend.h"
#include "check.h"
#include "device.h"

static void parses(const char *s, const char *kind, int index)
{
	pcg_err err = { "" };
	pcg_device d = { NULL, -1 };
	char name[32];

	CHECKF(pcg_device_parse(s, &d, &err) == 0, "%s: %s", s ? s : "NULL", err.msg);
	if (d.kind == NULL)
		return;
	CHECKF(strcmp(d.kind->name, kind) == 0 && d.index == index, "%s: %s %d", s ? s : "NULL",
	       d.kind->name, d.index);
	pcg_device_name(d, name, sizeof name);
	printf("%-12s -> %s\n", s ? s : "NULL", name);
}

static void refused(const char *s)
{
	pcg_err err = { "" };
	pcg_device d;
	char want[128];

	snprintf(want, sizeof want, "device '%s': want cpu, cuda or cuda:N", s);
	CHECKF(pcg_device_parse(s, &d, &err) < 0 && strcmp(err.msg, want) == 0, "%s: %s", s,
	       err.msg);
}

int main(void)
{
	pcg_err err = { "" };
	pcg_device d;
	char name[32];

	parses(NULL, "cpu", 0);
	parses("", "cpu", 0);
	parses("cpu", "cpu", 0);
	parses("cuda", "cuda", 0);
	parses("cuda:0", "cuda", 0);
	parses("cuda:17", "cuda", 17);
	parses("cuda:2147483647", "cuda", 2147483647);
	refused("bogus");
	refused("cpu:0");
	refused("cpux");
	refused("cuda:");
	refused("cuda:x");
	refused("cuda:-1");
	refused("cuda:+1");
	refused("cuda:1x");
	refused("cuda:2147483648");
	refused("CUDA");

	d = pcg_device_cpu();
	CHECK(pcg_device_is_host(d) && pcg_device_check(d, &err) == 0);
	CHECK(strcmp(pcg_device_name(d, name, sizeof name), "cpu") == 0);
	pcg_backend *be = pcg_backend_open(d, &err);
	CHECK(be != NULL && pcg_backend_is_host(be));
	pcg_backend_close(&be);
	CHECK(be == NULL);

	/* A CUDA device past any machine's: refused by the check and by the
	 * backend, with its name (no GPU, or a build without CUDA, says so). */
	CHECK(pcg_device_parse("cuda:1048576", &d, &err) == 0 && !pcg_device_is_host(d));
	CHECKF(pcg_device_check(d, &err) < 0 && strstr(err.msg, "device cuda:1048576: ") != NULL,
	       "%s", err.msg);
	printf("cuda:1048576 refused: %s\n", err.msg);
	CHECK(pcg_backend_open(d, &err) == NULL && strstr(err.msg, "cuda:1048576") != NULL);
	return check_done("test_device");
}
