# frozen_string_literal: true

# So that `require "workdo-function"` (the gem's name) works as well as `require "workdo/function"`.
require_relative "workdo/function"
