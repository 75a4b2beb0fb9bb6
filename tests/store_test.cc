#include <gtest/gtest.h>
// Written by the store_test work in progress.
