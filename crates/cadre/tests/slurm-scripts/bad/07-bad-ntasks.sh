#!/bin/bash
#SBATCH -n x
echo done
