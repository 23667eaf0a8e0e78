#!/bin/bash
#SBATCH --oversubscribe=x
echo done
