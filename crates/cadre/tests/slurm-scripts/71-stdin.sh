#!/bin/bash
# stdin
#SBATCH -N 2
echo done
