/* targetd: the target model server of the pipeline (see lib/serve/modelserver.c
 * and man/targetd.8). */
#include "modelserver.h"

int main(int argc, char **argv)
{
	return modelserver_main(argc, argv, MS_TARGET);
}
