#!/bin/bash
cd /srv && toolbox --init
