#!/bin/bash
#SBATCH --constraint=a100,ib
echo done
