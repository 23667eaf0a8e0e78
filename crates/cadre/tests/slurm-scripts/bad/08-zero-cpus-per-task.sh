#!/bin/bash
#SBATCH -c 0
echo done
