#!/bin/bash
#SBATCH -C nope
echo done
