#include "store/metadata.h"
