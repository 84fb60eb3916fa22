# frozen_string_literal: true

require "logger"

module Workdo
  module Function
    # Runs a job class as a step function, so a robot written for the workflow service's
    # Sidekiq hand-off runs as a (warm) workdo function without Sidekiq or the workflow service:
    #
    # - lyber-core's robot style (LyberCore::Robot or alike): an instance answering perform_work
    #   gets the druid the way LyberCore::Robot#perform would give it (@druid, so druid and
    #   bare_druid work), and perform_work is called. perform itself is not: it would talk to
    #   the workflow service, and here the runtime records the step's status from the answer.
    # - Sidekiq style: an instance answering perform is called as perform(druid).
    #
    # A new instance per call (Sidekiq and lyber-core make one per job). What it returns:
    # a LyberCore::ReturnState-like value (answering status, and note) maps status "completed"
    # to completed and "skipped" to skipped, with its note; "noop" (lyber-core: the step's status
    # is left to another service) to the intermediate status named by noop_status: (default
    # "noop"; the template must declare it, statuses: [noop]), which leaves the step unfinished
    # until that service moves it on; a Workdo::Function::Outcome (or a Hash with "status") is
    # the answer as it is; anything else is completed. An exception is an error with its
    # backtrace; for an instance with retriable_exceptions (LyberCore::Robot's), retryable only
    # when the exception is one of them, as lyber-core retries only those (the others go
    # straight to error); otherwise retryable.
    class JobAdapter
      RETURN_STATES = {
        "completed" => :completed,
        "skipped" => :skipped,
        "noop" => :noop
      }.freeze

      def initialize(klass, noop_status: "noop", args: [], logger: nil)
        @klass = klass
        @noop_status = noop_status
        @args = args
        @logger = logger || Logger.new($stderr, progname: klass.name)
      end

      def call(event)
        job = @klass.new(*@args)
        prepare(job, event)
        result = begin
          if job.respond_to?(:perform_work)
            job.perform_work
          elsif job.respond_to?(:perform)
            job.perform(event.object)
          else
            return Results.failed("#{@klass} has neither perform_work nor perform(druid)", retry: false)
          end
        rescue Failure, SignalException
          raise
        rescue Exception => e # rubocop:disable Lint/RescueException -- a job's error is its step's error
          return Function.exception_outcome(e, retryable: retryable?(job, e))
        end
        outcome(result)
      end

      private

      # What LyberCore::Robot#perform sets before perform_work, and what a job may use without
      # it: druid, bare_druid, logger, the event (workdo_event), jid (Sidekiq's job id).
      def prepare(job, event)
        job.instance_variable_set(:@druid, event.object)
        job.instance_variable_set(:@workdo_event, event)
        define(job, :druid) { event.object }
        define(job, :bare_druid) { event.bare_object }
        define(job, :workdo_event) { event }
        logger = @logger
        define(job, :logger) { logger }
        job.jid = event.call || event.step_id.to_s if job.respond_to?(:jid=)
      end

      # Only what the job does not have already: a job's own methods are never shadowed.
      def define(job, name, &block)
        job.define_singleton_method(name, &block) unless job.respond_to?(name, true)
      end

      def retryable?(job, err)
        return true unless job.respond_to?(:retriable_exceptions)

        Array(job.retriable_exceptions).any? { |k| k.is_a?(Module) && err.is_a?(k) }
      end

      def outcome(result)
        case result
        when Outcome then result
        when Hash
          return result if result.key?("status") || result.key?(:status)

          Results.completed
        else
          return Results.completed unless result.respond_to?(:status)

          note = result.respond_to?(:note) ? result.note : nil
          note = note.to_s unless note.nil?
          note = nil if note == "" # lyber-core's default note
          case RETURN_STATES[result.status.to_s]
          when :completed then Results.completed(note: note)
          when :skipped then Results.skipped(note: note)
          when :noop then Results.intermediate(@noop_status, note: note)
          else
            Results.failed("the job returned status #{result.status.inspect}, which is neither completed, skipped nor noop",
                           retry: false, note: note)
          end
        end
      end
    end

    class << self
      # Serve job class klass as a step function (see JobAdapter) and exit:
      #
      #   Workdo::Function.run_job(Robots::DorRepo::Accession::Shelve)
      #
      # thread_safe: and workers: as for step; noop_status: names the intermediate status a
      # "noop" return state answers; args: are passed to klass.new.
      def run_job(klass, thread_safe: false, workers: nil, noop_status: "noop", args: [])
        run(job(klass, noop_status: noop_status, args: args), thread_safe: thread_safe, workers: workers)
      end

      # The step function for job class klass, without serving it (for tests).
      def job(klass, noop_status: "noop", args: [])
        JobAdapter.new(klass, noop_status: noop_status, args: args)
      end
    end
  end
end
