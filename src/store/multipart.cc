#include "store/multipart.h"
