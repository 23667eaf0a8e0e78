#!/bin/bash
#SBATCH --hint=foo
echo done
