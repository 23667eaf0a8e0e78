#!/bin/bash
#SBATCH -C a100
echo done
