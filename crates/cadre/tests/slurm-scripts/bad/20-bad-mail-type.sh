#!/bin/bash
#SBATCH --mail-type=foo
echo done
