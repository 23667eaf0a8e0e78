#!/bin/bash
#SBATCH -i /dev/zero
echo done
