// World is header-only; this translation unit keeps the comm library target non-empty until
// the communicators land.
#include "comm/world.h"
