#include "seed_consumer.c"
