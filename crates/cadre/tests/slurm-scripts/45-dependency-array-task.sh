#!/bin/bash
#SBATCH -d afterany:@ARRAY@_2
echo done
