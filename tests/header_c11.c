/*  Compiled alone with -std=c11 -pedantic -Werror: the public tensor header must be plain C11. */
#include "baton/tensor.h"

int main(void) {
    bt_dtype dtype = BT_F32;
    bt_tensor *t = NULL;
    return (int)bt_dtype_size(dtype) + (t != NULL);
}
