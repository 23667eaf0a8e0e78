#!/bin/bash
#SBATCH -D /tmp
#SBATCH -o rel/out.txt
echo done
