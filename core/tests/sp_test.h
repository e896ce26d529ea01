/* What every cmocka test file includes, in the order cmocka needs. */
#ifndef SP_TEST_H
#define SP_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#endif
