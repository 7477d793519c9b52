// CHILD_CHECK: an assertion for the body of a death test (EXPECT_EXIT), which runs in a child process where
// gtest's expectations are not reported: a failed check prints the condition on stderr and exits 1, so the
// parent's EXPECT_EXIT fails showing what went wrong.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHILD_CHECK(cond)                                      \
  do {                                                         \
    if (!(cond)) {                                             \
      std::fprintf(stderr, "child check failed: %s\n", #cond); \
      std::exit(1);                                            \
    }                                                          \
  } while (0)
