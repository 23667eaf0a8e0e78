#!/bin/bash
# args: --ntasks-per-n=2 --cpus-per-t 2 --nodes 2
echo done
