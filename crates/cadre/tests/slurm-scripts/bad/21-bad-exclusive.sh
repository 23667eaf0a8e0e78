#!/bin/bash
#SBATCH --exclusive=foo
echo done
