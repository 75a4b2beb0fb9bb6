#include "store/keys.h"
