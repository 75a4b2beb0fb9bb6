#include <gtest/gtest.h>
// Written by the text_editor_test work in progress.
