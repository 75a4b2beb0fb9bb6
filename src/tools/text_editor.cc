#include "tools/text_editor.h"
