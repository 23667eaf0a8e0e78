#!/bin/bash
#SBATCH --export=NONE,FOO=bar
echo done
