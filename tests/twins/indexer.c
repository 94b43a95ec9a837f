// indexer.c: twin checks (see twins.h). Filled in by the indexer work.
#include "twins.h"

void twins_indexer(int quick) { (void)quick; }
