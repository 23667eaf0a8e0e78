#!/bin/bash
#SBATCH --open-mode=foo
echo done
