// oracle.c: twin checks (see twins.h). Filled in by the oracle work.
#include "twins.h"

void twins_oracle(int quick) { (void)quick; }
